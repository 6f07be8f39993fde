"""Batch migration of a body of results from one target to another, and its executors."""
