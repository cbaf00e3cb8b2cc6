"""Writes (D3N write-through and write-back, Pfimbi replication; issue 14).

- ``journal`` (+ ``records``): the node's durable journal of acknowledged writes the lake does
  not have yet, and notices of those other nodes hold; crash order in its docstring;
- ``writeback``: the intake (journal, K synchronous copies, notices, then the 200);
- ``pending``: the lake as readers see it while writes are pending (read-your-writes);
- ``flusher``: the background work (lake flushes, copies beyond K) under policies/replication;
- ``peers`` + ``messages``: what nodes ask each other's journals, and how it travels;
- ``budget``: the bound on bodies held in memory for cache-on-write (write-through).

Write-through coherence (invalidations, cache-on-write) lives in ``cachetier.cachedlake``.
"""
