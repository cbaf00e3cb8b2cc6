"""Pure decisions: no sockets, no files, no clock.

Each policy takes ``now`` and snapshots as arguments and returns a decision, so it can be
unit-tested without a server. Imports neither ``gateway`` nor ``cachetier``
(tests/unit/test_policies_purity.py checks it). Each module defines its own snapshot and
decision types:

- ``placement``: nodes and weights -> R owner ids per partition (the ring's planning; the
  ring in ``cachetier.cluster.ring`` applies the table and looks blocks up); and Pisces' PP:
  per-partition demand and what each node can serve -> a few partitions moved off overloaded nodes.
- ``allocation``: Pisces' WA: per-node per-tenant demand -> each node's local tenant weights, by
  reciprocal swaps toward every tenant's weighted max-min share of the cluster; a node's
  weighted max-min service; the min-max ratio; a cluster-wide budget split among nodes by demand.
- ``selection``: which of a block's owners to ask, less suspect peers (per-peer health, now),
  and the fetch plan for a missed block (peer owners, then the lake); replica choice among
  candidates (peers or lake endpoints) by policy: ``micromon`` (C3's queue x service time with
  rate control, anomaly scores, the tenant's local weight: Pisces RS), ``round_robin``,
  ``least_outstanding`` (two random choices), ``latency`` (EWMA).
- ``anomaly``: MicroMon: host micrometrics -> compact anomaly reports against thresholds and a
  moving baseline; a node's anomaly score.
- ``tiering``: which tier (L1 or L2) keeps a fetched block.
- ``readahead``: the blocks fetched ahead of a reader, past its range when it is sequential.
- ``admission``: which objects the cache takes in by size (reads, write-through PUTs).
- ``fairness``: which tenant's queued work a node serves next (weighted DRR per resource:
  requests, client bytes, lake bytes; node token buckets; optional per-tenant hard limits).
- ``occupancy``: tenant-fair cache occupancy: each tenant's weighted share of a full store, and
  which tenant is evicted from first (the one most over its share; a shared block split k ways).
- ``retry``: whether a lake request is sent again and after how long (jittered backoff; the
  caller draws the random number and sleeps).
- ``reuse``: SHARDS (fixed-size): sampled block references -> reuse distances in bytes -> a
  miss-ratio curve (by references and by bytes), within a memory bound, decayed over time.
- ``sizing``: D3N's L1/L2 split: both tiers' curves, rates and miss costs -> the L1 size that
  minimises what misses cost, approached in bounded steps.
"""
