"""Runnable end-to-end examples and the model zoo (examples.models)."""
