"""The everyday S3 tools against every target: the AWS CLI (`aws s3 cp/ls/sync/rm`,
`aws s3api`), and curl on boto3 presigned URLs.

The CLI runs as a subprocess with its own config file (path-style addressing, nothing
else), so what it sends is the CLI's default: multipart above 8 MiB, CRC32 checksums.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import botocore.auth
import botocore.crt.auth
import pytest
from botocore.compat import get_current_datetime
from harness.endpoints import REGION, Target

MiB = 1024 * 1024
CLI_TIMEOUT_S = 300

AwsCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def aws(target: Target, tmp_path_factory: pytest.TempPathFactory) -> AwsCli:
    """Runs `aws ARGS...` against the target; fails the test on a non-zero exit."""
    executable = Path(sys.executable).parent / "aws"
    if not executable.exists():
        pytest.fail(f"no AWS CLI at {executable}: pip install -e '.[test]'")
    home = tmp_path_factory.mktemp("awscli")
    config = home / "config"
    config.write_text(f"[default]\nregion = {REGION}\ns3 =\n    addressing_style = path\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({
        "AWS_ACCESS_KEY_ID": target.access_key,
        "AWS_SECRET_ACCESS_KEY": target.secret_key,
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
        "HOME": str(home),
    })
    connection = ["--endpoint-url", target.endpoint_url]
    if target.tls:
        assert target.ca_bundle
        connection += ["--ca-bundle", target.ca_bundle]

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(executable), *args, *connection]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False,
                              timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if check and done.returncode != 0:
            pytest.fail(f"`aws {' '.join(args)}` exited {done.returncode}\n"
                        f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}")
        return done

    return run


def curl(target: Target, *args: str) -> subprocess.CompletedProcess[bytes]:
    tls = ["--cacert", target.ca_bundle] if target.tls and target.ca_bundle else []
    return subprocess.run(["curl", "-sS", *tls, *args], capture_output=True,
                          timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    """Files dated an hour back: `aws s3 sync` uploads a file again when its mtime is later
    than the object's whole-second LastModified, which a file written within the second of
    its upload can be."""
    an_hour_ago = datetime.datetime.now().timestamp() - 3600
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (an_hour_ago, an_hour_ago))


TREE = {
    "a.txt": b"alpha\n",
    "with space.txt": b"spaced out\n",
    "ünïcödé.txt": "ünïcödé\n".encode(),
    "sub/b.bin": os.urandom(70_000),
    "sub/deeper/c.txt": b"",
    "sub/deeper/plus+equals=.txt": b"odd name\n",
}


# ---- aws s3 ------------------------------------------------------------------------------------

def test_cp_upload_and_download(aws: AwsCli, bucket: str, tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(12 * MiB))
    aws("s3", "cp", str(source), f"s3://{bucket}/dir/big.bin")
    copy = tmp_path / "big.copy"
    aws("s3", "cp", f"s3://{bucket}/dir/big.bin", str(copy))
    assert sha256_file(copy) == sha256_file(source)

    head = json.loads(aws("s3api", "head-object", "--bucket", bucket, "--key", "dir/big.bin").stdout)
    assert head["ContentLength"] == 12 * MiB
    assert head["ETag"].endswith('-2"')  # the CLI uploads 8 MiB parts above 8 MiB


def test_ls(aws: AwsCli, bucket: str, tmp_path: Path) -> None:
    write_tree(tmp_path / "src", TREE)
    aws("s3", "sync", str(tmp_path / "src"), f"s3://{bucket}/")

    assert bucket in aws("s3", "ls").stdout.split()
    top = aws("s3", "ls", f"s3://{bucket}/").stdout.splitlines()
    assert "PRE sub/" in [line.strip() for line in top]
    assert sorted(line.split(maxsplit=3)[3] for line in top if not line.strip().startswith("PRE")
                  ) == sorted(["a.txt", "with space.txt", "ünïcödé.txt"])
    recursive = aws("s3", "ls", "--recursive", f"s3://{bucket}/").stdout.splitlines()
    listed = {line.split(maxsplit=3)[3]: int(line.split(maxsplit=3)[2]) for line in recursive}
    assert listed == {name: len(data) for name, data in TREE.items()}


def test_sync_round_trip_and_rm(aws: AwsCli, bucket: str, tmp_path: Path) -> None:
    source, back = tmp_path / "src", tmp_path / "back"
    write_tree(source, TREE)
    aws("s3", "sync", str(source), f"s3://{bucket}/tree/")
    aws("s3", "sync", f"s3://{bucket}/tree/", str(back))
    assert files_under(back) == TREE
    # nothing changed, so a second sync each way transfers nothing
    assert aws("s3", "sync", str(source), f"s3://{bucket}/tree/").stdout == ""
    assert aws("s3", "sync", f"s3://{bucket}/tree/", str(back)).stdout == ""

    aws("s3", "rm", "--recursive", f"s3://{bucket}/tree/")
    listing = json.loads(aws("s3api", "list-objects-v2", "--bucket", bucket).stdout or "{}")
    assert listing.get("Contents", []) == []


def test_s3api_put_head_list(aws: AwsCli, bucket: str, tmp_path: Path) -> None:
    body = tmp_path / "note.txt"
    body.write_bytes(b"noted\n")
    aws("s3api", "put-object", "--bucket", bucket, "--key", "notes/one note.txt",
        "--body", str(body), "--content-type", "text/plain", "--metadata", "owner=alice")
    head = json.loads(aws("s3api", "head-object", "--bucket", bucket,
                          "--key", "notes/one note.txt").stdout)
    assert head["ContentLength"] == 6
    assert head["ContentType"] == "text/plain"
    assert head["Metadata"] == {"owner": "alice"}
    assert head["ETag"] == f'"{hashlib.md5(body.read_bytes()).hexdigest()}"'

    listing = json.loads(aws("s3api", "list-objects-v2", "--bucket", bucket,
                             "--prefix", "notes/").stdout)
    assert [(o["Key"], o["Size"]) for o in listing["Contents"]] == [("notes/one note.txt", 6)]
    missing = aws("s3api", "head-object", "--bucket", bucket, "--key", "nope", check=False)
    assert missing.returncode != 0 and "404" in missing.stderr


# ---- presigned URLs with curl ----------------------------------------------------------------

def test_presigned_get_with_curl(s3: Any, target: Target, bucket: str, tmp_path: Path) -> None:
    body = os.urandom(3 * MiB + 17)
    s3.put_object(Bucket=bucket, Key="shared/file name+1.bin", Body=body)
    url = s3.generate_presigned_url("get_object", ExpiresIn=300,
                                    Params={"Bucket": bucket, "Key": "shared/file name+1.bin"})
    out = tmp_path / "download"
    done = curl(target, "-f", "-o", str(out), url)
    assert done.returncode == 0, done.stderr.decode()
    assert out.read_bytes() == body

    ranged = curl(target, "-f", "-r", "1000-1999", url)
    assert ranged.returncode == 0, ranged.stderr.decode()
    assert ranged.stdout == body[1000:2000]


def test_presigned_put_with_curl(s3: Any, target: Target, bucket: str, tmp_path: Path) -> None:
    upload = tmp_path / "upload.bin"
    upload.write_bytes(os.urandom(100_000))
    url = s3.generate_presigned_url("put_object", ExpiresIn=300,
                                    Params={"Bucket": bucket, "Key": "uploaded via curl"})
    done = curl(target, "-f", "--upload-file", str(upload), url)
    assert done.returncode == 0, done.stderr.decode()
    assert s3.get_object(Bucket=bucket, Key="uploaded via curl")["Body"].read() == \
        upload.read_bytes()


def _signed_an_hour_ago(remove_tzinfo: bool = True) -> datetime.datetime:
    return get_current_datetime(remove_tzinfo) - datetime.timedelta(hours=1)


def test_expired_presigned_url_is_refused(s3: Any, target: Target, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="expired", Body=b"too late")
    # sign as if it were an hour ago, valid for a minute: expired, with no waiting.
    # botocore signs with awscrt when it is installed, so both signers' clocks are set back
    with mock.patch.object(botocore.auth, "get_current_datetime", _signed_an_hour_ago), \
            mock.patch.object(botocore.crt.auth, "get_current_datetime", _signed_an_hour_ago):
        url = s3.generate_presigned_url("get_object", ExpiresIn=60,
                                        Params={"Bucket": bucket, "Key": "expired"})
    signed_at = datetime.datetime.strptime(parse_qs(urlsplit(url).query)["X-Amz-Date"][0],
                                           "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    age = datetime.datetime.now(datetime.UTC) - signed_at
    assert age > datetime.timedelta(minutes=59), url  # the clock really was set back
    done = curl(target, "-w", "\n%{http_code}", url)
    body, _, status = done.stdout.decode().rpartition("\n")
    assert status == "403"
    assert "<Code>AccessDenied</Code>" in body


@pytest.mark.parametrize("target", ["gw-dir"], indirect=True)
def test_aws_s3_presign_is_sigv2_and_curl_reads_it(aws: AwsCli, s3: Any, target: Target, bucket: str) -> None:
    """`aws s3 presign` on its defaults signs SigV2 (AWSAccessKeyId, Signature, Expires)."""
    s3.put_object(Bucket=bucket, Key="shared/v2 file+1.txt", Body=b"read with sigv2")
    url = aws("s3", "presign", f"s3://{bucket}/shared/v2 file+1.txt", "--expires-in", "300").stdout.strip()
    assert {"AWSAccessKeyId", "Signature", "Expires"} <= parse_qs(urlsplit(url).query).keys(), url
    done = curl(target, "-f", url)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"read with sigv2"
    tampered = curl(target, "-w", "\n%{http_code}", url.replace("v2%20file", "v3%20file"))
    body, _, status = tampered.stdout.decode().rpartition("\n")
    assert status == "403" and "<Code>SignatureDoesNotMatch</Code>" in body
