"""The read path: object metadata and its single flight (``metadata``), blocks on their way in
(``fetch``), and the path from a byte range to blocks from L1, the L2 owner or the lake (``path``).
May import ``cachetier.lake``, ``blocks``, ``cluster``, ``telemetry`` and ``policies``."""
