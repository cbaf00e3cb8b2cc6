"""Fairness at run time (Pisces FQ): per-tenant queues and token accounting on a node. The
decisions (DRR order, weights) will live in ``policies/fairness.py``; the gateway's admission drives
this package. Empty until the fairness issue."""
