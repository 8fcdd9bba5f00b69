"""The runtime floor every chapter stands on: ranks, process groups, devices and traffic.

* :mod:`minipar.runtime.launch` starts fresh ranks from a warm zygote (``launch.run``);
  :mod:`minipar.runtime.pool` (caller side) and :mod:`minipar.runtime._rank` (zygote and rank
  side) hold its machinery; :func:`minipar.runtime.pool.usable_cpus` is public.
* :mod:`minipar.runtime.run` runs the same worker functions under ``torchrun``.
* :mod:`minipar.runtime.device` picks the backend and device (gloo on CPU, NCCL on GPUs).
* :mod:`minipar.runtime.tracer` records every collective's bytes, to compare with the cost model.
* :mod:`minipar.runtime.timing` holds the timing loops the chapters and benchmarks share.

Nothing here imports a chapter, the cost model, grading or widgets.
"""
