"""The in-memory store (``memory:``): :class:`~tunedb.index.memory.store.MemoryStore`, the
reference backend of the contract (nothing persists past the process)."""
