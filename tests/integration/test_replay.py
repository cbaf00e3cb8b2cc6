"""`lakegate trace synth --upload` and `lakegate replay`, run as the commands a user runs:
a ~200-request two-tenant trace replayed by 8 curl mappers through lakegate over the real
RGW, and against the RGW directly. Checks outcomes (no errors, every byte the trace
expects), never speed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.endpoints import Target, empty_and_delete_bucket, unique_bucket_name
from harness.processes import gateway_environment, lakegate_command

from tools.replay.trace import read_trace

COMMAND_TIMEOUT_S = 180
SYNTH_ARGS = ["--files", "80", "--requests", "200", "--tenants", "2", "--seed", "5",
              "--size-median", "128KiB", "--size-min", "4KiB", "--size-max", "2MiB",
              "--split-size", "512KiB", "--job-interval", "0.02"]


@dataclass(frozen=True)
class DataSet:
    trace: Path
    manifest: dict[str, Any]


def lakegate(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*lakegate_command(), *args], capture_output=True, text=True, check=False,
                          env=gateway_environment(), stdin=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT_S)
    return done


def keys(target: Target) -> list[str]:
    return ["--access-key", target.access_key, "--secret-key", target.secret_key]


@pytest.fixture(scope="module")
def data_set(rgw_target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataSet]:
    """The trace and its data set, uploaded to the RGW once for this module's tests."""
    folder = tmp_path_factory.mktemp("replay")
    trace = folder / "trace.jsonl"
    prefix = unique_bucket_name("replay")
    done = lakegate("trace", "synth", *SYNTH_ARGS, "--bucket-prefix", prefix, "--out", str(trace),
                    "--upload", "--endpoint", rgw_target.endpoint_url, *keys(rgw_target))
    manifest_path = trace.with_suffix(".manifest.json")
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"buckets": []}
    try:
        assert done.returncode == 0, done.stderr
        yield DataSet(trace, manifest)
    finally:
        s3 = rgw_target.client()
        for bucket in manifest["buckets"]:
            empty_and_delete_bucket(s3, bucket)
        s3.close()


def replay(data: DataSet, target: Target, *credentials: str) -> dict[str, Any]:
    result = data.trace.with_name(f"result-{target.name}.json")
    done = lakegate("replay", str(data.trace), "--endpoint", target.endpoint_url, "--mappers", "8",
                    "--json", str(result), *credentials)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-3000:]}"
    assert "completed in" in done.stderr  # the human summary
    printed: dict[str, Any] = json.loads(done.stdout)
    assert printed == json.loads(result.read_text())
    return printed


def check_complete(result: dict[str, Any], data: DataSet) -> None:
    records = read_trace(data.trace)
    expected = sum(r.expected_bytes or 0 for r in records)
    assert result["requests"] == len(records) == 200
    assert result["errors"] == 0, result["errors_by_status"]
    assert result["byte_mismatches"] == 0, result["mismatch_examples"]
    assert result["unchecked_requests"] == 0
    assert result["bytes"] == result["expected_bytes"] == expected
    assert result["cumulative_bytes"][-1][1] == expected
    assert len({r.tenant for r in records}) == 2 and any(r.byte_range for r in records)


def test_replay_through_lakegate_over_rgw(data_set: DataSet, gateway_rgw_target: Target) -> None:
    """One credential set (the gateway's tenant alice) for the trace's two tenants."""
    result = replay(data_set, gateway_rgw_target, *keys(gateway_rgw_target))
    check_complete(result, data_set)
    assert result["settings"]["mappers"] == 8


def test_replay_against_rgw_directly(data_set: DataSet, rgw_target: Target, tmp_path: Path) -> None:
    """Per-tenant keys from a credentials file in lakegate's tenants format."""
    credentials = tmp_path / "credentials.toml"
    credentials.write_text("".join(
        f'[[tenant]]\nname = "tenant-{n}"\naccess_key = "{rgw_target.access_key}"\n'
        f'secret_key = "{rgw_target.secret_key}"\n' for n in range(2)))
    result = replay(data_set, rgw_target, "--credentials", str(credentials))
    check_complete(result, data_set)
