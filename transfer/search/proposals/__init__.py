"""The sources of the Tuner's proposals, one module each, behind one interface (``base``).

Importing this package registers the built-in sources.  Each names the sources it runs after
(``after``); the registry derives the order the Tuner calls them in: ``exact`` and ``resume``
(look-ups), ``transferred_seeds`` (retrieval), ``guard`` (the history-free explorer's share, by
how well the history predicts this target), ``surrogate`` (RGPE), ``model`` (module ``ranked``: cost-model ranked
neighbours), ``default_first`` (the run's first configs) and ``random`` (the random fill).  They
hand work on through the seed queue and the model slot the Tuner owns (``handoff``).  A new
source: a module with a registered ``ProposalSource`` subclass, imported here after the sources
it names (a name must be registered before a source can name it).
"""

from __future__ import annotations

# isort: off
# registration order: every source after the ones it names (ties in the order keep this order)
from tunedb.transfer.search.proposals import lookups, seeds, guard, surrogate, ranked, first, random_fill
# isort: on
from tunedb.transfer.search.proposals.base import (
           ProposalSource,
           Round,
           SearchState,
           order,
           register,
           sources,
           unregister,
)
from tunedb.transfer.search.proposals.handoff import ModelSlot, SeedQueue, SeedSource

__all__ = ["ModelSlot", "ProposalSource", "Round", "SearchState", "SeedQueue", "SeedSource", "order", "register",
           "sources", "unregister", "first", "guard", "lookups", "random_fill", "ranked", "seeds", "surrogate"]
