"""The data plane: lake clients, and (in later steps) blocks, block stores, tiers, ring and paths.

Nothing here knows HTTP requests or SigV4; it is called by ``gateway`` with typed arguments
and raises the S3-coded errors of :mod:`cachetier.errors`.
"""
