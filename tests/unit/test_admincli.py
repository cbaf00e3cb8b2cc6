"""`lakegate admin`'s pure parts (tools/admincli.py): the query string every byte of which the
node's SigV4 check canonicalises alike, where the credential comes from, and the text it prints."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tools.admincli import AdminError, Credential, credential, progress, query, table


def _args(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**{"token_file": None, "access_key": None, "secret_key": None, **given})


def test_query_encodes_every_reserved_byte() -> None:
    assert query({"bucket": "b", "prefix": "a b/c", "tenant": None, "limit": 5}) == "?bucket=b&prefix=a%20b%2Fc&limit=5"
    assert query({"prefix": ""}) == ""


def test_credential_sources(tmp_path: Path) -> None:
    assert credential(_args(access_key="K", secret_key="S"), {}) == Credential("K", "S")
    assert credential(_args(), {"LAKEGATE_ADMIN_ACCESS_KEY": "K", "LAKEGATE_ADMIN_SECRET_KEY": "S"}) == Credential("K", "S")
    (tmp_path / "secret").write_text("from-file\n")
    env = {"LAKEGATE_ADMIN_ACCESS_KEY": "K", "LAKEGATE_ADMIN_SECRET_KEY_FILE": str(tmp_path / "secret")}
    assert credential(_args(), env) == Credential("K", "from-file")
    (tmp_path / "token").write_text("a-token\n")
    assert credential(_args(token_file=str(tmp_path / "token")), env) == Credential(token="a-token")
    with pytest.raises(AdminError, match="no admin credential"):
        credential(_args(access_key="K"), {})
    with pytest.raises(AdminError, match="cannot read"):
        credential(_args(token_file=str(tmp_path / "missing")), {})


def test_a_credential_never_shows_its_secret() -> None:
    assert "S3CRET" not in repr(Credential("K", "S3CRET", "T0KEN")) and "T0KEN" not in repr(Credential(token="T0KEN"))


def test_progress_and_table() -> None:
    job = {"id": "0123456789abcdef", "state": "running", "listing": True, "objects_done": 1, "objects_total": 2,
           "bytes_done": 1 << 20, "bytes_total": 3 << 20, "error_count": 0}
    assert progress(job) == "warm 0123456789abcdef running: 1/2+ objects, 1.0MiB/3.0MiB+, 0 errors"
    doc = {"bucket": "b", "prefix": "p/", "objects_examined": 2, "objects_cached": 1, "truncated": False,
           "tiers": {"l1": {"objects": 1, "blocks": 2, "bytes": 5 << 20}},
           "objects": [{"key": "p/x", "size": 5 << 20, "blocks": 2, "cached": {"l1": 2}}]}
    lines = table(doc)
    assert lines[0] == "b/p/: 1 of 2 objects cached"
    assert lines[3].split() == ["l1", "1", "2", "5.0MiB"]
    assert lines[-1].split() == ["p/x", "5.0MiB", "2", "2"]
