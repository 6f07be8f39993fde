"""End-to-end workflows over the search: ``tune`` (``tunedb.tune``), ``tune_model`` (every task
of a model, ``tunedb tune-model``), ``demo``, ``report`` (an HTML page with figures) and its data
model ``rundata``, ``figures`` (shared by the report and the dashboard), ``dashboard/`` (a live,
read-only web view) and ``evaluation`` (the leave-one-device-out harness the benchmarks use)."""
