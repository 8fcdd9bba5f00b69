"""Validation data and fits: published and measured rows (measurements/), the fits that set the
constants, and the checks of the frozen model against rows it was not fitted on."""
