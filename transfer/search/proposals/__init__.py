"""The sources of the Tuner's proposals, one module each, behind one interface (``base``).

Importing this package registers the built-in sources, in the order the Tuner calls them:
``exact`` and ``resume`` (look-ups), ``transferred_seeds`` (retrieval), ``guard`` (the history-free explorer's share, by how well
the history predicts this target), ``surrogate`` (RGPE),
``model`` (cost-model ranked neighbours), ``default_first`` (the run's first configs) and
``random`` (the random fill).  A new source: a module with a registered ``ProposalSource``
subclass, imported here.
"""

from __future__ import annotations

from tunedb.transfer.search.proposals import guard, lookups, model, random_fill, seeds, surrogate
from tunedb.transfer.search.proposals.base import ProposalSource, Round, SearchState, register, sources, unregister

__all__ = ["ProposalSource", "Round", "SearchState", "register", "sources", "unregister",
           "guard", "lookups", "model", "random_fill", "seeds", "surrogate"]
