"""Data shipped with tunedb (hardware catalog, sample tuning data); see README.md here."""
