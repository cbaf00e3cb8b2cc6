"""Telemetry: the per-tenant counters of the data plane (``counters``); host micrometric sampling,
latency tracking and reuse-distance sampling land here with the sizing and replica-choice issues.
Plain numbers only: the gateway exports them. Imports nothing of lakegate but ``policies``."""
