"""Measurement: backends that turn (target, workload, config) into a Record.

``backend`` (the ``MeasureBackend`` interface, ``LocalBackend`` and the look-up-else-measure
helpers), ``runner`` (the isolated worker process), ``timing`` (the worker-side timing protocol),
``replay`` (Kernel Tuner cache replay).
"""
