"""Fairness at run time (Pisces FQ): per-tenant admission on a node. The decisions (DRR order per
resource, node capacity, hard limits) are ``policies.fairness``; ``admission.Fairness`` makes
tasks wait for them, and the gateway's admission, response sending and lake boundary drive it.
A queue past its bound raises ``admission.QueueFull``, an S3 503 SlowDown. May import
``cachetier.errors`` and ``policies``."""
