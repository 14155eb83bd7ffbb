"""Keeping a history: garbage collection, copying runs between histories, and process trees of runs."""
