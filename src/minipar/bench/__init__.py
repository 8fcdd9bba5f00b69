"""Benchmarks: ``minipar bench ...``. Speed claims come from here, reported as ratios."""
