"""Issue 11's admin credential through the whole app in-process: /_lakegate/admin/* answer only
a SigV4 request signed with the admin key (header or presigned) or the admin bearer token, never
a tenant's key; /metrics is open unless LAKEGATE_METRICS_AUTH, and a tenant-signed GET /metrics
is still S3 (bucket "metrics"); no metric label takes a value the client chose.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSPreparedRequest, AWSRequest
from botocore.credentials import Credentials
from harness.endpoints import ADMIN_ACCESS_KEY, ADMIN_SECRET_KEY, ALICE
from inprocess import AsgiBridge, lakegate_app
from prometheus_client.parser import text_string_to_metric_families

from cachetier import errors as data_plane_errors
from cachetier.errors import S3Error
from cachetier.lake.memory import MemoryLake
from cachetier.telemetry import host
from gateway import httplimits
from policies import anomaly
from gateway.s3 import errors as protocol_errors
from gateway.s3.handlers import HANDLERS

ENDPOINT = "http://localhost:21400"  # never connected to: the bridge answers
TOKEN = "a-bearer-token-for-prometheus-0123"
STATS = "/_lakegate/admin/stats"


def _bridge(folder: Path, **overrides: object) -> Iterator[AsgiBridge]:
    served = AsgiBridge(lakegate_app(folder, MemoryLake(), **overrides))
    served.start()
    yield served
    served.close()


def _admin_settings(folder: Path, **more: object) -> dict[str, object]:
    (folder / "token").write_text(TOKEN + "\n")
    return {"admin_access_key": ADMIN_ACCESS_KEY, "admin_secret_key": ADMIN_SECRET_KEY,
            "admin_token_file": folder / "token", **more}


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiBridge]:
    folder = tmp_path_factory.mktemp("admin")
    yield from _bridge(folder, **_admin_settings(folder))


@pytest.fixture(scope="module")
def metrics_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiBridge]:
    folder = tmp_path_factory.mktemp("metrics-auth")
    yield from _bridge(folder, **_admin_settings(folder, metrics_auth=True))


@pytest.fixture(scope="module")
def unconfigured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiBridge]:
    yield from _bridge(tmp_path_factory.mktemp("no-admin"))


def signed(path: str, access_key: str = ADMIN_ACCESS_KEY, secret_key: str = ADMIN_SECRET_KEY,
           region: str = "us-east-1") -> AWSPreparedRequest:
    request = AWSRequest("GET", f"{ENDPOINT}{path}")
    S3SigV4Auth(Credentials(access_key, secret_key), "s3", region).add_auth(request)
    return request.prepare()


def presigned(path: str) -> AWSPreparedRequest:
    request = AWSRequest("GET", f"{ENDPOINT}{path}")
    S3SigV4QueryAuth(Credentials(ADMIN_ACCESS_KEY, ADMIN_SECRET_KEY), "s3", "eu-west-1", expires=60).add_auth(request)
    return request.prepare()


def unsigned(path: str, headers: dict[str, str] | None = None) -> AWSPreparedRequest:
    return AWSPreparedRequest("GET", f"{ENDPOINT}{path}", headers or {}, b"", True)


def bearer(path: str, token: str) -> AWSPreparedRequest:
    return unsigned(path, {"Authorization": f"Bearer {token}"})


def answer(bridge: AsgiBridge, request: AWSPreparedRequest) -> tuple[int, bytes]:
    response = bridge.send(request)
    return response.status_code, response.content


def denied(bridge: AsgiBridge, request: AWSPreparedRequest) -> str:
    """The message of a 403 admin refusal (and that it says nothing else)."""
    status, body = answer(bridge, request)
    assert status == 403, body
    doc = json.loads(body)
    assert set(doc) == {"error", "message"} and doc["error"] == "AccessDenied"
    return str(doc["message"])


# ---- /_lakegate/admin/* ----


@pytest.mark.parametrize("path", [STATS, "/_lakegate/admin/cluster", "/_lakegate/admin/locate?bucket=b&key=k",
                                  "/_lakegate/admin/nothing-here"])
def test_an_unsigned_admin_request_is_refused(bridge: AsgiBridge, path: str) -> None:
    assert "admin credential" in denied(bridge, unsigned(path))


def test_a_tenants_key_is_not_the_admin_credential(bridge: AsgiBridge) -> None:
    message = denied(bridge, signed(STATS, ALICE.access_key, ALICE.secret_key))
    assert ALICE.access_key not in message


def test_the_admin_key_with_a_wrong_secret_is_refused(bridge: AsgiBridge) -> None:
    denied(bridge, signed(STATS, secret_key="not-the-admin-secret-at-all"))


def test_the_admin_key_reads_every_admin_endpoint_in_any_region(bridge: AsgiBridge) -> None:
    status, body = answer(bridge, signed(STATS, region="ap-south-2"))
    assert status == 200 and json.loads(body)["tenants"] == ["alice"]
    status, body = answer(bridge, signed("/_lakegate/admin/locate?bucket=b&key=k&index=0"))
    assert status == 200 and json.loads(body)["held"] == {}
    status, _ = answer(bridge, signed("/_lakegate/admin/cluster"))
    assert status == 404  # reached: this node is not in a cluster


def test_a_presigned_admin_url(bridge: AsgiBridge) -> None:
    status, body = answer(bridge, presigned(STATS))
    assert status == 200 and "cache" in json.loads(body)


def test_the_bearer_token(bridge: AsgiBridge) -> None:
    status, _ = answer(bridge, bearer(STATS, TOKEN))
    assert status == 200
    denied(bridge, bearer(STATS, TOKEN[:-1] + "x"))
    denied(bridge, bearer(STATS, ""))
    denied(bridge, bearer(STATS, ADMIN_SECRET_KEY))


def test_without_an_admin_credential_the_admin_endpoints_say_how_to_turn_them_on(unconfigured: AsgiBridge) -> None:
    for request in (unsigned(STATS), signed(STATS, ALICE.access_key, ALICE.secret_key), bearer(STATS, TOKEN)):
        message = denied(unconfigured, request)
        assert "LAKEGATE_ADMIN_ACCESS_KEY" in message and "LAKEGATE_ADMIN_TOKEN_FILE" in message


def test_health_stays_open_and_says_only_health(unconfigured: AsgiBridge) -> None:
    status, body = answer(unconfigured, unsigned("/_lakegate/health"))
    assert status == 200 and json.loads(body) == {"status": "ok"}


# ---- /metrics ----


def test_metrics_are_open_by_default(bridge: AsgiBridge) -> None:
    status, body = answer(bridge, unsigned("/metrics"))
    assert status == 200 and b"lakegate_s3_requests_total" in body


def test_metrics_signed_with_the_admin_key_are_the_metrics_not_s3(bridge: AsgiBridge) -> None:
    for request in (signed("/metrics"), bearer("/metrics", TOKEN)):
        status, body = answer(bridge, request)
        assert status == 200 and b"lakegate_s3_requests_total" in body


@pytest.mark.parametrize("fixture", ["bridge", "metrics_auth"])
def test_a_tenant_signed_get_metrics_is_still_s3(fixture: str, request: pytest.FixtureRequest) -> None:
    served: AsgiBridge = request.getfixturevalue(fixture)
    status, body = answer(served, signed("/metrics", ALICE.access_key, ALICE.secret_key))
    assert status == 404 and b"<Code>NoSuchBucket</Code>" in body  # bucket "metrics"


def test_metrics_auth_needs_the_admin_credential(metrics_auth: AsgiBridge) -> None:
    assert "admin credential" in denied(metrics_auth, unsigned("/metrics"))
    denied(metrics_auth, bearer("/metrics", "wrong-token-wrong-token"))
    for request in (signed("/metrics"), presigned("/metrics"), bearer("/metrics", TOKEN)):
        status, body = answer(metrics_auth, request)
        assert status == 200 and b"lakegate_s3_requests_total" in body
    status, _ = answer(metrics_auth, unsigned("/_lakegate/health"))
    assert status == 200


# ---- no label a client chooses ----


def _error_codes() -> set[str]:
    classes: list[type[S3Error]] = [S3Error]
    codes = set()
    while classes:
        cls = classes.pop()
        codes.add(cls.s3_code or cls.__name__)
        classes.extend(cls.__subclasses__())
    assert protocol_errors and data_plane_errors  # both modules' classes are loaded
    return codes


def test_no_metric_label_takes_a_client_chosen_value(bridge: AsgiBridge) -> None:
    chosen = "client-chosen-9f2c"
    for request in (
        unsigned(f"/{chosen}/{chosen}?{chosen}=1"),
        unsigned(f"/{chosen}?torrent"),
        signed(f"/{chosen}/{chosen}?uploadId={chosen}", ALICE.access_key, ALICE.secret_key),
        signed(f"/{chosen}", ALICE.access_key, ALICE.secret_key),
        signed(f"/{chosen}", access_key=chosen.upper(), secret_key=chosen),
        unsigned(f"/{chosen}", {"Authorization": f"{chosen} Credential={chosen}/x"}),
        AWSPreparedRequest(chosen.upper(), f"{ENDPOINT}/{chosen}/k", {}, b"", True),
        AWSPreparedRequest("PATCH", f"{ENDPOINT}/{chosen}/k", {}, b"", True),
    ):
        status, _ = answer(bridge, request)
        assert 400 <= status < 600
    status, body = answer(bridge, unsigned("/metrics"))
    assert status == 200
    allowed = {
        "operation": set(HANDLERS) | {"Unknown"},
        "code": _error_codes(),
        "tenant": {ALICE.name, "anonymous"},
        "reason": set(httplimits.REASONS),
        # the node's own micrometrics, named by lakegate: an anomaly appears whenever the test
        # machine is loaded (lakegate_anomaly_severity{metric=...})
        "metric": set(host.METRICS) | set(anomaly.METRICS),
    }
    seen: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            for label, value in sample.labels.items():
                seen.setdefault(label, set()).add(value)
    assert chosen not in body.decode() and chosen.upper() not in body.decode()
    assert "Unknown" in seen["operation"]  # the requests the front end could not name
    for label, values in seen.items():
        if label == "status":
            assert all(v.isdigit() and len(v) == 3 for v in values), values
        elif label in allowed:
            assert values <= allowed[label], (label, values - allowed[label])
        else:  # prometheus_client's own (python_info, gc) and the cluster's ring_info: none here
            assert label in {"implementation", "major", "minor", "patchlevel", "version", "generation", "le"}, label


def test_the_replicas_report_names_the_policy(bridge: AsgiBridge) -> None:
    assert "admin credential" in denied(bridge, unsigned("/_lakegate/admin/replicas"))
    status, body = answer(bridge, signed("/_lakegate/admin/replicas"))
    assert status == 200 and json.loads(body) == {"policy": "micromon", "lake": {}, "peers": {}}  # a folder lake, alone
