"""tunedb dashboard: a live, read-only web view of a DB (``tunedb dashboard``)."""
