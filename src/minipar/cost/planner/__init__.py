"""The planner: the cost-term table, a layout's step breakdown, the search, and the frozen model."""
