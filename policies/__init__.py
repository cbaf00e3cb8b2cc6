"""Pure decisions: no sockets, no files, no clock.

Each policy takes ``now`` and snapshots as arguments and returns a decision, so it can be
unit-tested without a server. Imports neither ``gateway`` nor ``cachetier``.
"""
