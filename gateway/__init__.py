"""The edge and the process: HTTP, the S3 protocol, SigV4 auth, tenants, settings, app wiring
and the ``lakegate`` CLI. May import ``cachetier`` and ``policies``; nothing imports it but the
CLI entry point and the tests.
"""
