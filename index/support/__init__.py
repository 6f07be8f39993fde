"""Helpers below everything else in ``tunedb.index`` (they import nothing of ``tunedb``).

``fsutil`` (durable file writes and locks: the one atomic write, with fsync), ``cachedir`` (where
derived caches live), ``lazy`` (names resolved on first use) and ``redact`` (secrets masked in
locations and messages).
"""
