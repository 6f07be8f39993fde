"""Search: schedule spaces, adaptation of neighbours' configs, the cost model and the seeded tuner."""
