"""Views: stores composed of other stores, each a :class:`~tunedb.index.contract.base.RecordStore`
run by the contract suite.

``layered`` (a writable store over read-only layers), ``trust`` (records only from trusted
sources) and ``filtered`` (look-ups answer only records that pass a filter).
"""
