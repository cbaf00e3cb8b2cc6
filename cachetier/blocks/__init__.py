"""Blocks and where they are kept: block ids and spans (``ids``), the BlockStore protocol with its
in-memory twin and the disk store (``store``) and the disk store's index (``index``). May import
``cachetier.errors``; knows nothing of the lake, the read path or the cluster."""
