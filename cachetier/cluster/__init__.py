"""The cluster (D3N's L2 across nodes): the partition ring (``ring``), membership (``membership``),
the peer protocol and client (``peers``) and a node's view of the others (``node``). May import
``cachetier.lake``, ``cachetier.net``, ``cachetier.errors`` and ``policies``."""
