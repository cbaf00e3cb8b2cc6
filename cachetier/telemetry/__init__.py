"""Telemetry: the per-tenant counters of the data plane (``counters``), typed query answers
(``snapshots``), host micrometric sampling (``host``), reuse sampling and miss costs for cache
sizing (``reuse``), and the per-candidate signals of replica choice (``choice``). Plain numbers
only: the gateway exports them. Imports nothing of lakegate but ``policies``."""
