"""The client snippets of docs/clients.md, run against a real lakegate over the test RGW: the aws
cli, curl (SigV4 and a presigned URL), pyarrow, polars and pandas. If a reader's library changes
how it addresses S3, this fails before a user's job does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.endpoints import REGION, Target, empty_and_delete_bucket, unique_bucket_name

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pafs = pytest.importorskip("pyarrow.fs")
pl = pytest.importorskip("polars")
pd = pytest.importorskip("pandas")

pytestmark = pytest.mark.integration

ROWS = 5000


@pytest.fixture(scope="module")
def gateway(gateway_rgw_target: Target) -> Target:
    return gateway_rgw_target


@pytest.fixture(scope="module")
def dataset(gateway: Target) -> Iterator[str]:
    """A bucket with one Parquet file written through lakegate by pyarrow; its name."""
    client = gateway.client()
    bucket = unique_bucket_name("readers")
    client.create_bucket(Bucket=bucket)
    table = pa.table({"id": list(range(ROWS)), "name": [f"row-{i}" for i in range(ROWS)]})
    pq.write_table(table, f"{bucket}/events.parquet", filesystem=_arrow_fs(gateway), row_group_size=1000)
    yield bucket
    empty_and_delete_bucket(client, bucket)
    client.close()


def _arrow_fs(gateway: Target) -> Any:
    return pafs.S3FileSystem(endpoint_override=gateway.endpoint_url, access_key=gateway.access_key,
                             secret_key=gateway.secret_key, region=REGION)


def _env(gateway: Target) -> dict[str, str]:
    return {**os.environ, "AWS_ACCESS_KEY_ID": gateway.access_key, "AWS_SECRET_ACCESS_KEY": gateway.secret_key,
            "AWS_DEFAULT_REGION": REGION}


def _aws(gateway: Target, *args: str) -> str:
    aws = Path(sys.executable).with_name("aws")
    done = subprocess.run([str(aws), "--endpoint-url", gateway.endpoint_url, *args], env=_env(gateway),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_pyarrow_reads_what_it_wrote(gateway: Target, dataset: str) -> None:
    fs = _arrow_fs(gateway)
    table = pq.read_table(f"{dataset}/events.parquet", filesystem=fs, columns=["name"])
    assert table.num_rows == ROWS and table.column("name")[ROWS - 1].as_py() == f"row-{ROWS - 1}"
    assert pq.ParquetFile(fs.open_input_file(f"{dataset}/events.parquet")).metadata.num_row_groups == 5


def test_polars_reads_and_scans(gateway: Target, dataset: str) -> None:
    options = {"aws_endpoint_url": gateway.endpoint_url, "aws_access_key_id": gateway.access_key,
               "aws_secret_access_key": gateway.secret_key, "aws_region": REGION, "aws_allow_http": "true"}
    df = pl.read_parquet(f"s3://{dataset}/events.parquet", storage_options=options)
    assert df.shape == (ROWS, 2)
    count = pl.scan_parquet(f"s3://{dataset}/*.parquet", storage_options=options).filter(pl.col("id") < 10).collect()
    assert count.height == 10


def test_pandas_reads_through_pyarrow(gateway: Target, dataset: str) -> None:
    df = pd.read_parquet(f"{dataset}/events.parquet", filesystem=_arrow_fs(gateway))
    assert len(df) == ROWS and int(df["id"].sum()) == ROWS * (ROWS - 1) // 2


def test_aws_cli_copy_list_and_presign_with_curl(gateway: Target, dataset: str, tmp_path: Path) -> None:
    source = tmp_path / "data.csv"
    source.write_bytes(b"a,b\n" + b"1,2\n" * 10_000)
    _aws(gateway, "s3", "cp", str(source), f"s3://{dataset}/data.csv")
    assert "data.csv" in _aws(gateway, "s3", "ls", f"s3://{dataset}/")
    url = _aws(gateway, "s3", "presign", f"s3://{dataset}/data.csv").strip()
    curl = shutil.which("curl")
    assert curl is not None, "curl is one of make test's Debian packages"
    got = subprocess.run([curl, "-sf", url], capture_output=True, timeout=60)
    assert got.returncode == 0 and got.stdout == source.read_bytes()


def test_curl_sigv4(gateway: Target, dataset: str) -> None:
    curl = shutil.which("curl")
    assert curl is not None
    got = subprocess.run(
        [curl, "-sf", "--aws-sigv4", f"aws:amz:{REGION}:s3", "--user", f"{gateway.access_key}:{gateway.secret_key}",
         "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", f"{gateway.endpoint_url}/{dataset}/events.parquet"],
        capture_output=True, timeout=60)
    assert got.returncode == 0 and got.stdout[:4] == b"PAR1"
