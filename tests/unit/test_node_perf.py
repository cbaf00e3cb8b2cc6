"""The node benchmark's pure pieces: nginx's config, the sides' order, the workload sizes,
reading curl's output, and the targets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks.node_perf import CheckFailed, check_curl, curl_command, mapper_sizes, rotate, target
from harness.endpoints import S3Endpoint
from harness.nginx import render_config
from harness.units import KiB, MiB


def test_the_nginx_config_caches_4m_slices_and_passes_the_signature_through(tmp_path: Path) -> None:
    conf = render_config(upstream="127.0.0.1:7590", port=7610, workers=2, prefix=tmp_path)
    for line in ("worker_processes 2;", "daemon off;", "listen 127.0.0.1:7610 reuseport;", "slice 4m;",
                 "proxy_cache_key $uri$is_args$args$slice_range;", "proxy_set_header Range $slice_range;",
                 "proxy_cache_valid 200 206 1d;", "proxy_cache_lock on;", "sendfile on;",
                 "proxy_set_header Host $http_host;", "server 127.0.0.1:7590;",
                 f"proxy_cache_path {tmp_path}/cache "):
        assert line in conf
    assert "user " not in conf
    assert conf.count("{") == conf.count("}")
    assert render_config(upstream="h:1", port=1, workers=1, prefix=tmp_path, user="root").startswith("user root;\n")


@pytest.mark.parametrize(("upstream", "workers"), [("http://h:1", 1), ("", 1), ("h:1", 0)])
def test_the_nginx_config_refuses_a_url_or_no_workers(tmp_path: Path, upstream: str, workers: int) -> None:
    with pytest.raises(ValueError):
        render_config(upstream=upstream, port=1, workers=workers, prefix=tmp_path)


def test_the_sides_order_flips_each_round() -> None:
    assert rotate(("a", "b", "c"), 0) == ("a", "b", "c")
    assert rotate(("a", "b", "c"), 1) == ("c", "b", "a")
    assert rotate(("a", "b", "c"), 2) == ("a", "b", "c")


def test_mapper_objects_are_1_to_8_mib_and_the_same_every_run() -> None:
    sizes = mapper_sizes(48)
    assert len(sizes) == 48 and sizes == mapper_sizes(48)
    assert all(1 * MiB <= n <= 8 * MiB and n % KiB == 0 for n in sizes)


def test_curl_signs_each_url_and_discards_each_body() -> None:
    cmd = curl_command(S3Endpoint("http://127.0.0.1:1", "AK", "SK", "eu-1"), ["u1", "u2"])
    assert cmd[cmd.index("--aws-sigv4") + 1] == "aws:amz:eu-1:s3"
    assert cmd[cmd.index("--user") + 1] == "AK:SK"
    assert cmd[-6:] == ["--output", "/dev/null", "u1", "--output", "/dev/null", "u2"]


def test_curl_output_must_be_200_with_every_byte_for_every_url() -> None:
    check_curl((0, "200 10\n200 20\n"), [10, 20], "ok")
    check_curl(subprocess.CompletedProcess([], 0, "200 5\n"), [5], "ok")
    for code, out in ((0, "200 10\n403 20\n"), (0, "200 10\n"), (0, "200 10\n200 19\n"), (7, "200 10\n200 20\n")):
        with pytest.raises(CheckFailed):
            check_curl((code, out), [10, 20], "bad")


def test_targets_pass_at_their_bound() -> None:
    assert target(2.0, 2.0, "max") == {"max": 2.0, "value": 2.0, "met": True}
    assert not target(2.1, 2.0, "max")["met"]
    assert target(0.5, 0.5, "min")["met"] and not target(0.4, 0.5, "min")["met"]
