"""The runtime floor every chapter stands on: ranks, process groups, devices and traffic.

:mod:`~minipar.runtime.launch` starts fresh ranks from a warm zygote (its machinery:
:mod:`~minipar.runtime.pool` and :mod:`~minipar.runtime._rank`); :mod:`~minipar.runtime.run`
runs the same worker functions under ``torchrun``; :mod:`~minipar.runtime.device` picks the
backend and device; :mod:`~minipar.runtime.tracer` records every collective's bytes;
:mod:`~minipar.runtime.timing` holds the shared timing loops. Nothing here imports a chapter,
the cost model, grading or widgets.
"""
