"""Control loops: thin drivers around pure policies, each a callback ``(now) -> next interval``
(membership today; telemetry, allocation, placement and sizing with their issues)."""
