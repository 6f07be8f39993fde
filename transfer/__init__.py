"""What creates or moves records: kernels, measurement, search, warm-start, migration, importers, CLI."""
