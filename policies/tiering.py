"""Tiering (D3N's two tiers): which of this node's stores keeps a block it fetched.

L1 holds what this node's clients read, L2 this node's share of the cluster's blocks (the
partitions it owns). A block this node owns goes to L2 when it has one (a single node without
L2 keeps everything in L1); a block from a peer, or one it fetched from the lake for want of a
reachable owner, goes to L1.
"""

from __future__ import annotations

from enum import Enum


class Tier(Enum):
    L1 = "l1"
    L2 = "l2"


def keeper(*, owned_here: bool, has_l2: bool) -> Tier:
    """The tier that keeps a fetched block."""
    return Tier.L2 if owned_here and has_l2 else Tier.L1
