"""The store contract: :class:`~tunedb.index.contract.base.RecordStore` and the helpers every
backend shares.

``base`` (the contract), ``checks`` (argument and commit validation), ``runs_codec`` (run
summaries), ``tables`` (whole-table reads: entries, best costs), ``retention`` (what ``forget``
keeps), ``answers`` (batch look-up answers) and ``decisions`` (stored A-vs-B verdicts).  Imports
only the record model and ``tunedb.index.support``; never a backend, a view or retrieval.
"""
