"""The record model: what one record is and how it is keyed, stored and costed.

``record`` (one measured config), ``batch`` (many records as columns), ``keys`` (canonical JSON
and the keys of targets, workloads and configs), ``schema`` (the Arrow schema at rest),
``version`` (schema and package versions) and ``estimate`` (the one cost estimator: the statistic
every surface shows).  Imports nothing of ``tunedb`` above ``tunedb.index.support``.
"""
