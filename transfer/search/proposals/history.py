"""The seed sources' own records, read once per run and shared by the proposal sources that
model them (the guard's prior, ``guard.prior_table``; the RGPE source models, ``surrogate``).

Both read every record of each seed source's entry (config, cost, status) and parse its config
texts; reading and parsing them once per run, when the first of them needs it (after the run's
first evaluations, not before), keeps that work off the path to the first measurement.  What
they compute from it is what they computed from their own reads: the sources' entries are other
(target, workload) pairs than the one being tuned, so the run's own commits never change them.
"""

from __future__ import annotations

import json
import weakref
from typing import Any

from tunedb.transfer.search.proposals.base import SearchState, sig

__all__ = ["SourceRows", "source_rows"]


class SourceRows:
    """One seed source's records: ``configs`` (config JSON texts), ``costs`` (seconds or None)
    and ``statuses``, row for row as ``db.records`` returned them, and :meth:`parsed` /
    :meth:`signature` of a config text (computed once per text for the whole run: the sources
    of one run mostly share their configs)."""

    def __init__(self, configs: list[str], costs: list[Any], statuses: list[str],
                 parsed: dict[str, Any], sigs: dict[str, str]) -> None:
        self.configs, self.costs, self.statuses = configs, costs, statuses
        self._parsed, self._sigs = parsed, sigs

    def parsed(self, text: str) -> Any:
        """``json.loads(text)`` (raises as it does; the caller must not modify the value)."""
        got = self._parsed.get(text)
        if got is None:
            got = self._parsed[text] = json.loads(text)
        return got

    def signature(self, text: str) -> str:
        """``sig(json.loads(text))``: the Tuner's signature of the config (raises as they do)."""
        got = self._sigs.get(text)
        if got is None:
            got = self._sigs[text] = sig(self.parsed(text))
        return got


#: per running Tuner (weakly): {"rows": source index -> SourceRows or the exception its read
#: raised, "parsed": config text -> value, "sigs": config text -> signature}
_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def source_rows(state: SearchState, i: int) -> SourceRows:
    """The records of seed source ``i`` (``state.seeds.sources[i]``), read once per run
    (``db.records(target, workload, columns=["config", "cost", "status"])``); an exception the
    read raised is raised again to every caller."""
    try:
        run = _RUNS.setdefault(state, {"rows": {}, "parsed": {}, "sigs": {}})
    except TypeError:  # a state that cannot be weakly referenced: nothing shared
        run = {"rows": {}, "parsed": {}, "sigs": {}}
    got = run["rows"].get(i)
    if got is None:
        m = state.seeds.sources[i].match
        try:
            t = state.db.records(m.target, m.workload, columns=["config", "cost", "status"])
            got = SourceRows(t.column("config").to_pylist(), t.column("cost").to_pylist(),
                             t.column("status").to_pylist(), run["parsed"], run["sigs"])
        except Exception as e:  # kept, so a second caller sees the same failure without reading again
            got = e
        run["rows"][i] = got
    if isinstance(got, Exception):
        raise got
    return got
