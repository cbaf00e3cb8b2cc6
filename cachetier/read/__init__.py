"""The read path: object metadata and its single flight (``metadata``), blocks on their way in
and their registry (``fetch``), this node's tiers L1 and L2 (``tiers``), where a missing block
comes from: the owner's L2 or the lake (``sources``), sequential readers (``sequential``), and
``ReadPath``, which coordinates them from a byte range to its blocks (``path``).
May import ``cachetier.lake``, ``blocks``, ``cluster``, ``telemetry`` and ``policies``."""
