"""The data plane: the lake, blocks and their stores, the read path, the cluster, and (soon) writes,
fairness and telemetry. One sub-package per role:

- ``lake/``: the Lake protocol and its value types, the in-memory twin, S3Lake (``s3/``), DirLake
- ``net/``: the lean HTTP/1.1 transport used for the lake and for peers
- ``blocks/``: block ids, the BlockStore protocol and twin, the disk store and its index
- ``read/``: object metadata, the fetch single flight, the read path, tiers and sources
- ``cluster/``: ring, membership, the peer wire protocol, the peer client, the owner side
- ``telemetry/``: counters (and later host and reuse sampling)
- ``write/``, ``fairness/``: homes of the coming mechanisms

Nothing here knows HTTP requests or SigV4: it is called by ``gateway`` with typed arguments and
raises the S3-coded errors of :mod:`cachetier.errors`. May import ``policies``, never ``gateway``.
"""
