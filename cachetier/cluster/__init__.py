"""The cluster (D3N's L2 across nodes): the partition ring (``ring``), membership (``membership``),
the typed peer wire protocol (``wire``), the peer client and its Protocol (``client``) with its
in-memory twin (``memory``), the receiving side of the peer API (``owner``) and a node's view of
the others (``node``). May import ``cachetier.lake``, ``cachetier.net``, ``cachetier.blocks.ids``,
``cachetier.context``, ``cachetier.errors`` and ``policies``."""
