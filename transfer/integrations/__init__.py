"""Optional integrations with heavy dependencies, imported lazily: TVM MetaSchedule, Ray."""
