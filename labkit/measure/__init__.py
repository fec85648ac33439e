"""Measurements taken inside real runs; twins of ``labkit.predict``."""
