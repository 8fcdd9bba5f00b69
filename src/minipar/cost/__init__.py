"""Pure-Python cost model (no torch import). Every formula names its source."""
