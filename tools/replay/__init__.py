"""Trace replay: ``lakegate replay`` and ``lakegate trace synth``."""
