"""The replay's mappers and report, with a fake ``curl`` (a script that answers from its
arguments and logs when it ran): arrival offsets, Range headers, errors and mismatches,
the JSON result and the command's exit codes. No network."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest

from gateway.cli import main
from tools.replay import report
from tools.replay.credentials import Credentials, CredentialsError, Keys
from tools.replay.runner import Replay, ReplayOptions
from tools.replay.trace import TraceRecord, write_trace

# Answers like curl --write-out would: 404 for keys named "missing*", exit 7 (could not
# connect) for "down*", else 206 with the Range header's length or 200 with 1000 bytes
# ("short*": one byte less). Appends "<unix time> <key> <range>" to $FAKE_CURL_LOG.
FAKE_CURL = r'''#!{python}
import os, sys, time
from urllib.parse import urlsplit
args = sys.argv[1:]
url = args[args.index("--url") + 1]
key = urlsplit(url).path.rsplit("/", 1)[-1]
rng = next((a.split("=", 1)[1] for a in args if a.startswith("Range: bytes=")), "")
with open(os.environ["FAKE_CURL_LOG"], "a") as log:
    log.write(f"{{time.time()}} {{key}} {{rng or '-'}}\n")
if key.startswith("down"):
    print("curl: (7) Failed to connect", file=sys.stderr); print("000 0 0.001 0", end=""); sys.exit(7)
if key.startswith("missing"):
    print("404 243 0.002 0.001", end=""); sys.exit(0)
size = int(rng.split("-")[1]) - int(rng.split("-")[0]) + 1 if rng else 1000
print(f"{{206 if rng else 200}} {{size - key.startswith('short')}} 0.003 0.001", end="")
'''


@pytest.fixture
def fake_curl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "curl"
    script.write_text(FAKE_CURL.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_CURL_LOG", str(tmp_path / "curl.log"))
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")  # the command finds the fake first
    return script


def curl_log(fake_curl: Path) -> list[tuple[float, str, str]]:
    lines = (fake_curl.parent / "curl.log").read_text().splitlines()
    return [(float(t), key, rng) for t, key, rng in (line.split(" ") for line in lines)]


KEYS = Credentials({}, Keys("AKIDTEST", "secret"))


def options(fake_curl: Path, **extra: object) -> ReplayOptions:
    return ReplayOptions(endpoint="http://127.0.0.1:9", mappers=4, curl=str(fake_curl), **extra)  # type: ignore[arg-type]


def test_requests_wait_for_their_arrival_offsets(fake_curl: Path) -> None:
    records = [TraceRecord(offset, f"j{i}", "t", "b", f"k{i}", None, None, 1000)
               for i, offset in enumerate([0.0, 0.0, 0.4, 0.8, 0.8])]
    start = time.time()
    outcomes = Replay(records, KEYS, options(fake_curl, speed=2.0)).run()
    assert [o.ok for o in outcomes] == [True] * 5
    sent = {key: t - start for t, key, _ in curl_log(fake_curl)}
    for i, record in enumerate(records):
        assert sent[f"k{i}"] >= record.offset / 2.0  # never before its (sped-up) offset
        assert outcomes[i].started >= record.offset / 2.0


def test_no_wait_ignores_offsets(fake_curl: Path) -> None:
    records = [TraceRecord(3600.0, "j", "t", "b", "k")]
    outcomes = Replay(records, KEYS, options(fake_curl, wait=False)).run()
    assert outcomes[0].ok and outcomes[0].started < 3600


def test_ranges_errors_and_mismatches_are_counted(fake_curl: Path) -> None:
    records = [
        TraceRecord(0, "j", "t", "b", "k1", 0, 99, 1000),
        TraceRecord(0, "j", "t", "b", "k2", 900, 1999, 1000),  # past the end: 100 bytes expected
        TraceRecord(0, "j", "t", "b", "k3", None, None, 1000),
        TraceRecord(0, "j", "t", "b", "short1", None, None, 1000),
        TraceRecord(0, "j", "t", "b", "missing1"),
        TraceRecord(0, "j", "t", "b", "down1"),
    ]
    outcomes = Replay(records, KEYS, options(fake_curl)).run()
    assert {key: rng for _, key, rng in curl_log(fake_curl)}["k1"] == "0-99"
    res = report.result(outcomes, {})
    assert res["requests"] == 6 and res["ok"] == 4 and res["errors"] == 2
    assert res["errors_by_status"] == {"404": 1, "curl:7": 1}
    assert res["byte_mismatches"] == 2  # k2 (the fake sends the full range) and short1
    assert {m["key"] for m in res["mismatch_examples"]} == {"k2", "short1"}
    assert res["cumulative_bytes"][-1][1] == res["bytes"] == 100 + 1100 + 1000 + 999 + 243
    assert "errors by status: 404 x1, curl:7 x1" in report.summary(res)


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert [report.percentile(values, p) for p in (50, 90, 99, 100)] == [50, 90, 99, 100]
    assert report.percentile([], 50) == 0.0


def test_credentials_file_and_fallback(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text('[[tenant]]\nname = "etl"\naccess_key = "AK1"\nsecret_key = "S1"\n')
    only_file = Credentials.load(path, None, None)
    assert only_file.keys_for("etl") == Keys("AK1", "S1")
    with pytest.raises(CredentialsError, match="ops"):
        only_file.check_covers(["etl", "ops"])
    with_default = Credentials.load(path, "AK0", "S0")
    with_default.check_covers(["etl", "ops"])
    assert with_default.keys_for("ops") == Keys("AK0", "S0")
    with pytest.raises(CredentialsError, match="no credentials"):
        Credentials.load(None, None, None)


def test_credentials_file_reads_a_tenants_file_and_allows_shared_keys(tmp_path: Path) -> None:
    example = Credentials.load(Path(__file__).parents[2] / "deploy" / "tenants.example.toml", None, None)
    assert set(example.by_tenant) == {"demo", "etl"}
    shared = tmp_path / "shared.toml"
    shared.write_text("".join(f'[[tenant]]\nname = "t{n}"\naccess_key = "AK"\nsecret_key = "S"\n' for n in range(2)))
    assert Credentials.load(shared, None, None).keys_for("t1") == Keys("AK", "S")
    shared.write_text('[[tenant]]\nname = "t0"\naccess_key = "AK"\n')
    with pytest.raises(CredentialsError, match="tenant #1 needs name, access_key and secret_key"):
        Credentials.load(shared, None, None)


def test_replay_command_exit_codes_and_json(fake_curl: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    write_trace(trace, [TraceRecord(0, "j", "t", "b", "k", 0, 9, 100), TraceRecord(0, "j", "t", "b", "missing")])
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as exited:
        main(["replay", str(trace), "--endpoint", "http://127.0.0.1:9", "--access-key", "A",
              "--secret-key", "S", "--json", str(out), "--no-progress"])
    assert exited.value.code == 1  # one 404
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["errors_by_status"] == {"404": 1} and printed["bytes"] == 10 + 243


def test_replay_command_refuses_a_bad_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"offset": 0, "job": "j", "tenant": "t", "bucket": "b", "key": "k"}\n{"offset": 1}\n')
    with pytest.raises(SystemExit) as exited:
        main(["replay", str(trace), "--endpoint", "http://127.0.0.1:9", "--access-key", "A", "--secret-key", "S"])
    assert exited.value.code == 2
    assert "t.jsonl:2: missing field 'job'" in capsys.readouterr().err


def test_synth_command_writes_trace_and_manifest(tmp_path: Path) -> None:
    out = tmp_path / "trace.csv"
    main(["trace", "synth", "--files", "50", "--requests", "80", "--size-median", "64KiB", "--size-min", "1KiB",
          "--size-max", "1MiB", "--split-size", "128KiB", "--tenants", "2", "--out", str(out)])
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert len(out.read_text().splitlines()) == 81  # header + requests
    assert manifest["params"]["split_size"] == 128 * 1024
    assert manifest["buckets"] == ["replay-tenant-0", "replay-tenant-1"]


def test_plot_draws_a_png(tmp_path: Path) -> None:
    res = {"requests": 2, "errors": 0, "bytes": 300, "cumulative_bytes": [[0.1, 100], [0.2, 300]]}
    report.plot(res, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")
