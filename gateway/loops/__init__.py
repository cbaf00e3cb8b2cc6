"""Control loops: thin drivers around pure policies, each a round repeated every interval:
membership (heartbeats), and the fairness leader's weight allocation and partition placement
(``leader`` holds what those two share); telemetry and sizing come with their issues."""
