"""tunedb for TVM: MetaSchedule's database backed by tunedb (``database``: ``TunedbDatabase``),
the warm-started search and cost-model pre-training (``search``), tuning a whole Relax model
(``models``), and the log formats (``autotvm_logs``: AutoTVM's JSON-lines logs,
``metaschedule_logs``: MetaSchedule's JSONDatabase; ``tunedb import/export --format autotvm`` and
``--format metaschedule``).  Importing any of them imports no TVM; TVM loads when a function
that needs it runs."""
