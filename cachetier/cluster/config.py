"""``MembershipConfig``: the ring's shape and the heartbeat timing of a cluster, and the one place
their defaults live (the gateway's settings take theirs from here). Every node of a cluster must
be given the same partitions and replicas."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class MembershipConfig:
    partitions: int = 1024  # what blocks hash to; the unit the ring assigns
    replicas: int = 1  # owners per partition
    heartbeat_interval: float = 1.0  # seconds between heartbeat rounds; a failed peer is suspect this long
    failure_timeout: float = 3.0  # a peer silent this long leaves the ring

    def __post_init__(self) -> None:
        if self.failure_timeout <= self.heartbeat_interval:
            raise ValueError(f"failure_timeout ({self.failure_timeout:g} s) must be longer than heartbeat_interval "
                             f"({self.heartbeat_interval:g} s)")
