"""SigV4 signing cost per lake request on this machine: awscrt (what S3Lake signs with) against
botocore, both as S3Lake used it before (S3SigV4Auth.add_auth, UNSIGNED-PAYLOAD) and behind
the common ``Signer`` interface, plus S3Lake's whole request build for a GET.

``python -m benchmarks.signers [--seconds S]`` prints one JSON line: microseconds of CPU per
signature (best of five timed rounds, the machine is shared), no network.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from cachetier.lake.s3.client import S3Lake
from cachetier.lake.s3.config import S3LakeConfig
from cachetier.lake.s3.signing import UNSIGNED_PAYLOAD, BotocoreSigner, CrtSigner

ACCESS_KEY, SECRET_KEY, REGION = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1"
HOST = "lake.test:7480"
TARGET = "/bucket/some/key%20with%20space.parquet"
HEADERS = {"host": HOST, "x-amz-checksum-mode": "ENABLED", "range": "bytes=0-4194303"}


def _per_call_us(action: Callable[[], object], seconds: float) -> float:
    """CPU microseconds per call: the best of five rounds of ``seconds / 5`` each."""
    best = float("inf")
    for _ in range(5):
        calls, start = 0, time.process_time()
        deadline = time.perf_counter() + seconds / 5
        while time.perf_counter() < deadline:
            for _ in range(100):
                action()
            calls += 100
        best = min(best, (time.process_time() - start) / calls)
    return round(best * 1e6, 2)


def _botocore_as_before() -> Callable[[], object]:
    signer = S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION)
    unsigned = Config(s3={"payload_signing_enabled": False})

    def sign() -> object:
        request = AWSRequest(method="GET", url="http://" + HOST + TARGET, headers=dict(HEADERS))
        request.context["client_config"] = unsigned
        signer.add_auth(request)
        return request.headers

    return sign


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per signer")
    seconds = parser.parse_args().seconds
    crt, boto = CrtSigner(ACCESS_KEY, SECRET_KEY, REGION), BotocoreSigner(ACCESS_KEY, SECRET_KEY, REGION)
    lake = S3Lake(S3LakeConfig("http://" + HOST, ACCESS_KEY, SECRET_KEY, REGION))
    now = datetime.now(UTC)
    figures = {
        "awscrt": _per_call_us(lambda: crt.sign("GET", TARGET, HEADERS, UNSIGNED_PAYLOAD, now), seconds),
        "botocore_add_auth": _per_call_us(_botocore_as_before(), seconds),
        "botocore_signer": _per_call_us(lambda: boto.sign("GET", TARGET, HEADERS, UNSIGNED_PAYLOAD, now), seconds),
        "s3lake_get_request": _per_call_us(
            lambda: lake._signed("GET", "bucket", "some/key with space.parquet", {}, dict(HEADERS), None, None),
            seconds,
        ),
    }
    ratio = round(figures["botocore_add_auth"] / figures["awscrt"], 2)
    result = {"benchmark": "signers", "unit": "us_cpu_per_get", **figures, "botocore_over_awscrt": ratio}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
