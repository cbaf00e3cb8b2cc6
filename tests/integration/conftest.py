"""Integration tier: the boto3 conformance suite (tests/conformance.py, shared with tests/asgi),
and the tier's other suites, run against several S3 endpoints.

Like moto's boto3 suite rerun against a live server, every test takes the session-scoped,
parametrised `target` fixture and runs once per endpoint:

    rgw          Ceph RGW itself (S3_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY:
                 the `rgw_target` fixture of tests/conftest.py)
    gw-rgw       `lakegate serve` in front of that RGW
    gw-dir       `lakegate serve` on its embedded folder lake (--lake dir:PATH)
    gw-rgw-tls   gw-rgw over HTTPS (self-signed CA made with trustme)
    gw-dir-tls   gw-dir over HTTPS

The RGW answers are the reference: a test states what RGW does, so wherever lakegate in
front of RGW answers differently, the test fails. Gateways are started lazily (only for
the targets selected, e.g. `-k gw-dir`) and stopped at the end of the session.

`pytest --target gw-dir --target rgw` runs only those targets (the option repeats).
Without S3_ENDPOINT_URL the whole tier is skipped; `make test` starts a throwaway Ceph and
sets it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import trustme
from conformance import boto3_defaults_only, fresh_bucket, target_client

from harness.ceph import NO_RGW
from harness.endpoints import (
    ALICE,
    TARGETS,
    S3Endpoint,
    Target,
)
from harness.gateway import Gateway

_TARGET_FIXTURES = {
    "rgw": "rgw_target",
    "gw-rgw": "gateway_rgw_target",
    "gw-dir": "gateway_dir_target",
    "gw-rgw-tls": "gateway_rgw_tls_target",
    "gw-dir-tls": "gateway_dir_tls_target",
}

@pytest.fixture(scope="session", autouse=True)
def _integration_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if not os.environ.get("S3_ENDPOINT_URL"):
        pytest.skip(NO_RGW)
    with boto3_defaults_only(tmp_path_factory.mktemp("aws")):
        yield


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A throwaway CA and a server certificate for localhost / 127.0.0.1."""
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1", "*.localhost")
    files = {"ca": folder / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.private_key_pem.write_to_path(str(files["key"]))
    with open(files["cert"], "wb") as out:  # leaf first, then the chain
        out.writelines(blob.bytes() for blob in server.cert_chain_pems)
    return {name: str(path) for name, path in files.items()}


def _serve(tmp_path_factory: pytest.TempPathFactory, name: str, lake: S3Endpoint | str,
           tls: dict[str, str] | None) -> Iterator[Target]:
    gateway = Gateway(lake, tenants=(ALICE,), env={"LAKEGATE_VIRTUAL_HOST_SUFFIXES": "localhost"}, tls=tls,
                      workdir=tmp_path_factory.mktemp(name))
    try:
        gateway.start()
        yield gateway.target(name, "dir" if isinstance(lake, str) else "rgw")
    finally:
        gateway.stop()


def _dir_lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"dir:{tmp_path_factory.mktemp('dirlake')}"


@pytest.fixture(scope="session")
def gateway_rgw_target(tmp_path_factory: pytest.TempPathFactory,
                       rgw_target: Target) -> Iterator[Target]:
    yield from _serve(tmp_path_factory, "gw-rgw", rgw_target.endpoint, None)


@pytest.fixture(scope="session")
def gateway_dir_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    yield from _serve(tmp_path_factory, "gw-dir", _dir_lake(tmp_path_factory), None)


@pytest.fixture(scope="session")
def gateway_rgw_tls_target(tmp_path_factory: pytest.TempPathFactory, rgw_target: Target,
                           tls_files: dict[str, str]) -> Iterator[Target]:
    yield from _serve(tmp_path_factory, "gw-rgw-tls", rgw_target.endpoint, tls_files)


@pytest.fixture(scope="session")
def gateway_dir_tls_target(tmp_path_factory: pytest.TempPathFactory,
                           tls_files: dict[str, str]) -> Iterator[Target]:
    yield from _serve(tmp_path_factory, "gw-dir-tls", _dir_lake(tmp_path_factory), tls_files)


@pytest.fixture(scope="session", params=TARGETS)
def target(request: pytest.FixtureRequest) -> Target:
    """The endpoint under test; restrict a test with
    `@pytest.mark.parametrize("target", [...], indirect=True)`."""
    result: Target = request.getfixturevalue(_TARGET_FIXTURES[request.param])
    return result


@pytest.fixture(scope="session")
def s3(target: Target) -> Iterator[Any]:
    """boto3 S3 client for the target (conformance.target_client)."""
    yield from target_client(target)


@pytest.fixture(scope="session")
def rgw_s3(rgw_target: Target) -> Iterator[Any]:
    """boto3 S3 client straight to RGW: the reference a gateway answer is compared with."""
    client = rgw_target.client()
    yield client
    client.close()


@pytest.fixture
def bucket(s3: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh bucket on the target, deleted afterwards (conformance.fresh_bucket)."""
    yield from fresh_bucket(s3, request)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure against a gateway target, show the end of that gateway's log."""
    report = yield
    if report.failed:
        target = getattr(item, "funcargs", {}).get("target")
        if isinstance(target, Target) and target.log_tail():
            report.sections.append((f"lakegate log, last lines ({target.log_path})",
                                    target.log_tail(20)))
    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--target NAME`: deselect the other targets' runs."""
    wanted = config.getoption("target")
    if not wanted:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("target") if callspec else None
        (drop if name is not None and name not in wanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
