"""The helm chart (deploy/helm/lakegate) checked without helm or a cluster, by reading its files.

No helm binary and no Kubernetes run here, so what can be checked for real is: values.yaml
against values.schema.json (and bad values refused by it); the plain manifests kept beside the
chart (what `helm template` renders for the default values, written by hand) against the
Kubernetes 1.30 schemas that kubernetes-validate ships (offline, strict: unknown fields fail);
and, parsing the templates as text, that templates and manifests agree on the objects, ports,
probe paths and LAKEGATE_* settings, that every `.Values.x.y` a template reads exists, and that
every LAKEGATE_* name is a setting of .env.example. The templates are never rendered.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
import socket
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway.tenants import TenantDirectory

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / "deploy" / "helm"
CHART = HELM / "lakegate"
DEFAULT = HELM / "lakegate-default.yaml"
SERVICE_MONITOR = HELM / "lakegate-servicemonitor.yaml"
KUBERNETES = "1.30"  # the oldest version the chart supports (Chart.yaml's kubeVersion)

# Added to .env.example by the health-and-drain part of issue 16 (built at the same time as the
# chart); once that part is merged they are in .env.example and this set can be emptied.
# env entries the StatefulSet has only when an admin credential is configured (not by default)
ADMIN_ONLY = {"LAKEGATE_ADMIN_ACCESS_KEY", "LAKEGATE_ADMIN_SECRET_KEY", "LAKEGATE_ADMIN_TOKEN_FILE", "LAKEGATE_METRICS_AUTH"}
SETTING = re.compile(r"\bLAKEGATE_[A-Z0-9_]*[A-Z0-9]\b")


def _values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


@functools.cache  # read-only: a test that changes a document changes a deep copy
def _documents(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(template the document came from, the document) for each document of a plain manifest."""
    documents = []
    for text in re.split(r"^---$", path.read_text(), flags=re.MULTILINE):
        body = yaml.safe_load(text)
        if body:
            source = re.search(r"^# Source: lakegate/templates/(\S+)$", text, flags=re.MULTILINE)
            assert source, f"a document of {path.name} names no template it came from"
            documents.append((source.group(1), body))
    return documents


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    return _documents(DEFAULT) + _documents(SERVICE_MONITOR)


def _templates() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((CHART / "templates").iterdir())}


def _object_templates() -> dict[str, str]:
    return {name: text for name, text in _templates().items() if name.endswith(".yaml")}


def _by_kind(kind: str) -> dict[str, Any]:
    (found,) = [doc for _, doc in _documents(DEFAULT) if doc["kind"] == kind]
    return found


def _service(name: str) -> dict[str, Any]:
    (found,) = [doc for _, doc in _documents(DEFAULT) if doc["kind"] == "Service" and doc["metadata"]["name"] == name]
    return found


def _kinds(template: str) -> list[str]:
    return re.findall(r"^kind: (\w+)$", template, flags=re.MULTILINE)


def _settings_of_env_example() -> set[str]:
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^(LAKEGATE_[A-Z0-9_]+)=", text, flags=re.MULTILINE))


def _container() -> dict[str, Any]:
    (container,) = _by_kind("StatefulSet")["spec"]["template"]["spec"]["containers"]
    return container


def _actions(text: str) -> list[str]:
    """The template actions of a file (between {{ and }}), comments left out."""
    return [a for a in re.findall(r"\{\{-?\s*(.*?)\s*-?\}\}", text, flags=re.DOTALL) if not a.startswith("/*")]


def _bytes(size: str) -> int:
    """Kubernetes quantities (100Gi) and lakegate's sizes (40GiB), the binary units both use."""
    number, unit = re.fullmatch(r"([0-9.]+)\s*([KMGTP]i)?B?", size).groups()  # type: ignore[union-attr]
    return int(float(number) * 1024 ** (" KMGTP".index(unit[0]) if unit else 0))


# ---- values.yaml and values.schema.json


def test_values_yaml_validates_against_values_schema() -> None:
    jsonschema.Draft7Validator.check_schema(_schema())
    jsonschema.Draft7Validator(_schema()).validate(_values())


def _with(path: str, value: Any) -> dict[str, Any]:
    values = copy.deepcopy(_values())
    *parents, leaf = path.split(".")
    node = values
    for key in parents:
        node = node[key]
    node[leaf] = value
    return values


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("replicaCount", 0),
        ("replicaCount", "3"),
        ("unknownTopLevel", True),
        ("service.port", 70000),
        ("image.pullPolicy", "Sometimes"),
        ("lake.endpoint", "dir:var/lake"),  # a folder lake per pod is no shared lake
        ("cluster.secret", "too-short"),  # lakegate refuses a cluster secret under 16 characters
        ("admin.secretKey", "an-admin-secret-long-enough"),  # with no admin.accessKey
        ("config", {"LAKEGATE_NODE_ID": "node1"}),  # set by the chart from the pod name
        ("config", {"LAKEGATE_PEERS": "dns:elsewhere:9000"}),
        ("config", {"lakegate_log_level": "debug"}),
        ("config", {"LAKEGATE_LOG_LEVEL": ["debug"]}),
        ("config", {"LAKEGATE_CACHE_CAPACITY": 1073741824}),  # helm would write 1.073741824e+09
        ("shutdown.flushTimeout", 86400),
        ("tenants.list", [{"name": "etl", "access_key": "AK"}]),  # no secret_key
        ("tenants.list", [{"name": "etl", "access_key": "AK", "secret_key": "s", "weight": 0}]),
        ("tenants.list", [{"name": "etl", "access_key": "AK", "secret_key": "s", "wieght": 2}]),
        ("cache.size", "lots"),
        ("cache.mountPath", "var/cache"),
        ("shutdown.timeout", -1),
        ("podSecurityContext.runAsNonRoot", False),
        ("serviceMonitor.enabled", "yes"),
        ("lake.existingSecret", "Not_A_Secret_Name"),
        ("admin.token", "too-short"),
        ("metricsAuth", True),  # with no admin token for Prometheus to send
        ("metricsAuth", "true"),
    ],
)
def test_values_schema_rejects_bad_values(path: str, value: Any) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_schema()).validate(_with(path, value))


def test_values_schema_accepts_a_configured_cluster() -> None:
    values = _with("tenants.list", [{"name": "etl", "access_key": "AK", "secret_key": "s" * 20,
                                     "weight": 2.0, "buckets": ["etl-*"], "write_mode": "write-back"}])
    values["admin"] = {"accessKey": "ADMIN", "secretKey": "an-admin-secret-long-enough", "existingSecret": ""}
    values["cluster"] = {"secret": "", "existingSecret": "my-lakegate-cluster"}
    values["config"]["LAKEGATE_FAIRNESS"] = "fq+pp"
    values["podDisruptionBudget"]["maxUnavailable"] = "34%"
    jsonschema.Draft7Validator(_schema()).validate(values)
    values["metricsAuth"] = True  # Prometheus then sends the admin token: one is needed
    values["admin"]["token"] = "a-bearer-token-long-enough"
    jsonschema.Draft7Validator(_schema()).validate(values)
    values["admin"] = {"existingSecret": "my-admin", "existingSecretHasToken": True}
    jsonschema.Draft7Validator(_schema()).validate(values)


def test_values_config_names_real_settings() -> None:
    assert set(_values()["config"]) <= _settings_of_env_example()


def test_default_cache_capacities_fit_the_volume() -> None:
    values = _values()
    total = _bytes(values["config"]["LAKEGATE_CACHE_CAPACITY"]) + _bytes(values["config"]["LAKEGATE_L2_CAPACITY"])
    assert total <= 0.85 * _bytes(values["cache"]["size"])  # room for the journal and the filesystem


def test_tenants_rendered_as_json_values_are_a_tenants_file(tmp_path: Path) -> None:
    # _helpers.tpl writes each tenant key as `key = {{ value | toJson }}`: JSON strings (Go's,
    # with <, > and & escaped), numbers, booleans and arrays of strings are TOML values too.
    tenants = [{"name": "etl <nightly>", "access_key": "ETLKEY", "secret_key": 'se"cret&1', "weight": 2,
                "buckets": ["etl-*", "shared"], "max_lake_bandwidth": "50MB/s", "demo": False}]
    assert "{{ $key }} = {{ $value | toJson }}" in _templates()["_helpers.tpl"]
    def go_json(value: Any) -> str:
        return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

    lines = ["# lakegate tenants, from the chart's tenants.list"]
    for tenant in tenants:
        lines += ["", "[[tenant]]"] + [f"{k} = {go_json(v)}" for k, v in sorted(tenant.items())]
    (tmp_path / "tenants.toml").write_text("\n".join(lines) + "\n")
    loaded = TenantDirectory.load(tmp_path / "tenants.toml").by_access_key("ETLKEY")
    assert loaded and loaded.name == "etl <nightly>" and loaded.secret_key == 'se"cret&1' and loaded.weight == 2.0


# ---- the plain manifests against the Kubernetes schemas, offline


def test_plain_manifests_validate_against_kubernetes_schemas() -> None:
    for _, document in _documents(DEFAULT):
        assert kubernetes_validate.validate(document, KUBERNETES, strict=True) == KUBERNETES


def test_kubernetes_validation_catches_what_the_apiserver_would_refuse() -> None:
    statefulset = _by_kind("StatefulSet")
    typo = copy.deepcopy(statefulset)
    typo["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 110
    wrong_type = copy.deepcopy(statefulset)
    wrong_type["spec"]["replicas"] = "three"
    no_image = copy.deepcopy(statefulset)
    del no_image["spec"]["template"]["spec"]["containers"][0]["name"]
    for bad in (typo, wrong_type, no_image):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, KUBERNETES, strict=True)


def test_kubernetes_validation_opens_no_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    # the unit tier's conftest already refuses connect/bind; name resolution and urllib too here
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("kubernetes-validate reached for the network")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    for _, document in _documents(DEFAULT):
        kubernetes_validate.validate(document, KUBERNETES, strict=True)
    assert KUBERNETES in {v.rpartition(".")[0] for v in kubernetes_validate.utils.all_versions()}


def test_service_monitor_manifest_selects_the_client_service_port() -> None:
    ((source, monitor),) = _documents(SERVICE_MONITOR)
    assert source == "servicemonitor.yaml"
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    client = _service("lakegate")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= client["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in client["spec"]["ports"]}
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [monitor["metadata"]["namespace"]]


# ---- templates and manifests agree (templates read as text)


def test_every_manifest_document_comes_from_a_template_of_the_same_kind() -> None:
    templates = _object_templates()
    for source, document in _manifests():
        assert source in templates
        assert _kinds(templates[source]) == [document["kind"]]
    rendered = Counter(source for source, _ in _manifests())
    assert set(rendered) == set(templates)  # every template is rendered by one manifest or the other
    assert all(count == 1 for count in rendered.values())


def test_templates_and_manifests_name_the_same_kinds() -> None:
    template_kinds = Counter(kind for text in _object_templates().values() for kind in _kinds(text))
    assert template_kinds == Counter(doc["kind"] for _, doc in _manifests())
    assert template_kinds == Counter({"Service": 2, "StatefulSet": 1, "ConfigMap": 1, "Secret": 1,
                                      "PodDisruptionBudget": 1, "ServiceMonitor": 1})


def test_service_monitor_only_under_its_flag() -> None:
    template = _templates()["servicemonitor.yaml"]
    actions = _actions(template)
    assert actions[0] == "if .Values.serviceMonitor.enabled" and actions[-1] == "end"
    assert template.index("if .Values.serviceMonitor.enabled") < template.index("kind: ServiceMonitor")
    assert _values()["serviceMonitor"]["enabled"] is False
    assert "ServiceMonitor" not in {doc["kind"] for _, doc in _documents(DEFAULT)}


def test_templates_and_manifests_use_the_same_ports() -> None:
    templates = "\n".join(_object_templates().values())
    # every port of a template is the one value or the name s3 (no number written in a template)
    ports = re.findall(r"^\s*(?:- )?(?:port|containerPort|targetPort): (.+)$", templates, flags=re.MULTILINE)
    assert ports and set(ports) == {"{{ .Values.service.port }}", "s3"}
    assert set(re.findall(r"^\s*- name: (s3)$", templates, flags=re.MULTILINE)) == {"s3"}
    port = _values()["service"]["port"]
    assert "containerPort: {{ .Values.service.port }}" in templates
    container = _container()
    assert container["ports"] == [{"name": "s3", "containerPort": port, "protocol": "TCP"}]
    for name in ("lakegate", "lakegate-headless"):
        assert _service(name)["spec"]["ports"] == [{"name": "s3", "port": port, "targetPort": "s3", "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "s3"


def test_templates_and_manifests_probe_the_same_paths() -> None:
    statefulset = _object_templates()["statefulset.yaml"]
    template_probes = re.findall(r"^\s*(\w+Probe):\n\s*httpGet:\n\s*path: (\S+)$", statefulset, flags=re.MULTILINE)
    container = _container()
    probes = ("startupProbe", "livenessProbe", "readinessProbe")
    assert dict(template_probes) == {probe: container[probe]["httpGet"]["path"] for probe in probes}
    assert container["livenessProbe"]["httpGet"]["path"] == "/_lakegate/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/_lakegate/health/ready"


def _template_settings() -> set[str]:
    named = {name for text in _object_templates().values() for name in SETTING.findall(text)}
    return named | set(_values()["config"])


def _manifest_settings() -> set[str]:
    container = _container()
    env = {entry["name"] for entry in container["env"] if entry["name"].startswith("LAKEGATE_")}
    return env | set(_by_kind("ConfigMap")["data"])


def test_templates_and_manifests_name_the_same_settings() -> None:
    assert _manifest_settings() == _template_settings() - ADMIN_ONLY
    assert ADMIN_ONLY <= _template_settings()


def test_every_setting_named_is_a_setting_of_env_example() -> None:
    named = _template_settings() | _manifest_settings()
    named |= {n for text in _templates().values() for n in SETTING.findall(text)}
    named |= set(SETTING.findall((CHART / "values.yaml").read_text()))
    named |= set(SETTING.findall((CHART / "values.schema.json").read_text()))
    assert named - _settings_of_env_example() == set()


def test_every_value_a_template_reads_exists_in_values_yaml() -> None:
    values = _values()
    references = {ref for text in _templates().values() for ref in re.findall(r"\.Values((?:\.\w+)+)", text)}
    assert references
    for reference in references:
        node: Any = values
        for key in reference.strip(".").split("."):
            assert isinstance(node, dict) and key in node, f".Values{reference} is not in values.yaml"
            node = node[key]


def test_manifest_follows_the_default_values() -> None:
    values = _values()
    statefulset = _by_kind("StatefulSet")
    assert statefulset["spec"]["replicas"] == values["replicaCount"]
    assert _container()["image"] == f"{values['image']['repository']}:{values['image']['tag']}"
    assert _container()["resources"] == values["resources"]
    assert _container()["securityContext"] == values["securityContext"]
    assert statefulset["spec"]["template"]["spec"]["securityContext"] == values["podSecurityContext"]
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == values["cache"]["size"]
    data = _by_kind("ConfigMap")["data"]
    assert {k: data[k] for k in values["config"]} == {k: str(v) for k, v in values["config"].items()}
    assert data["LAKEGATE_SHUTDOWN_TIMEOUT"] == str(values["shutdown"]["timeout"])
    assert data["LAKEGATE_SHUTDOWN_FLUSH_TIMEOUT"] == str(values["shutdown"]["flushTimeout"])
    assert data["LAKEGATE_LAKE"] == values["lake"]["endpoint"]


# ---- what the default manifest means for a lakegate cluster


def test_nodes_have_stable_ids_addresses_and_volumes() -> None:
    statefulset = _by_kind("StatefulSet")
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel"
    env = {entry["name"]: entry for entry in _container()["env"]}
    assert env["LAKEGATE_NODE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    headless = statefulset["spec"]["serviceName"]
    assert env["LAKEGATE_ADVERTISE_URL"]["value"] == (
        f"http://$(LAKEGATE_NODE_ID).{headless}.$(POD_NAMESPACE).svc.cluster.local:9000")
    # $(VAR) expands only variables defined before it
    assert list(env).index("POD_NAMESPACE") < list(env).index("LAKEGATE_ADVERTISE_URL")
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in _container()["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == _by_kind("ConfigMap")["data"]["LAKEGATE_CACHE_DIR"]


def test_peers_are_found_through_the_headless_service_before_they_are_ready() -> None:
    statefulset = _by_kind("StatefulSet")
    headless = _service(statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    name, namespace = headless["metadata"]["name"], headless["metadata"]["namespace"]
    assert _by_kind("ConfigMap")["data"]["LAKEGATE_PEERS"] == f"dns:{name}.{namespace}.svc.cluster.local:9000"
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    for _, document in _documents(DEFAULT):
        selector = document.get("spec", {}).get("selector")
        if document["kind"] == "Service":
            assert selector.items() <= pod_labels.items()
        elif selector:
            assert selector["matchLabels"].items() <= pod_labels.items()


def test_grace_period_outlasts_the_drain() -> None:
    pod = _by_kind("StatefulSet")["spec"]["template"]["spec"]
    data = _by_kind("ConfigMap")["data"]
    drain = float(data["LAKEGATE_SHUTDOWN_TIMEOUT"]) + float(data["LAKEGATE_SHUTDOWN_FLUSH_TIMEOUT"])
    pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + drain
    shutdown = _values()["shutdown"]
    assert pod["terminationGracePeriodSeconds"] == sum(shutdown.values())  # as the template adds them


def test_secrets_and_tenants_file_come_from_the_secret() -> None:
    env = {entry["name"]: entry for entry in _container()["env"]}
    secret = _by_kind("Secret")
    for name in ("LAKEGATE_CLUSTER_SECRET", "LAKEGATE_LAKE_ACCESS_KEY", "LAKEGATE_LAKE_SECRET_KEY"):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    assert len(secret["stringData"]["cluster-secret"]) >= 16
    assert not set(_by_kind("ConfigMap")["data"]) & {"LAKEGATE_CLUSTER_SECRET", "LAKEGATE_LAKE_SECRET_KEY"}
    pod = _by_kind("StatefulSet")["spec"]["template"]["spec"]
    (tenants,) = [v for v in pod["volumes"] if v["name"] == "tenants"]
    assert tenants["secret"]["secretName"] == secret["metadata"]["name"]
    mount = {m["name"]: m for m in _container()["volumeMounts"]}["tenants"]
    (item,) = tenants["secret"]["items"]
    assert f"{mount['mountPath']}/{item['path']}" == _by_kind("ConfigMap")["data"]["LAKEGATE_TENANTS_FILE"]
    assert mount["readOnly"] is True and item["key"] in secret["stringData"]


def test_nodes_run_as_the_images_non_root_user() -> None:
    pod = _by_kind("StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == 10001
    container = _container()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}  # the only other place it writes


def test_disruption_budget_keeps_a_quorum_of_nodes() -> None:
    pdb = _by_kind("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 < _by_kind("StatefulSet")["spec"]["replicas"]


def test_config_checksum_is_the_sha256_of_the_configmap_as_rendered() -> None:
    # helm's `include ... | sha256sum` of configmap.yaml: its output, trailing newline included
    text = DEFAULT.read_text().split("# Source: lakegate/templates/configmap.yaml\n")[1].split("---\n")[0]
    annotations = _by_kind("StatefulSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["checksum/config"] == hashlib.sha256(text.encode()).hexdigest()


# ---- what can be checked of the template language without rendering it


def test_templates_blocks_are_closed() -> None:
    for name, text in _templates().items():
        assert text.count("{{") == text.count("}}"), name
        opened = [a for a in _actions(text) if re.match(r"(if|with|range|define)\b", a)]
        closed = [a for a in _actions(text) if a == "end"]
        assert len(opened) == len(closed), name


def test_every_helper_included_is_defined() -> None:
    helpers = _templates()["_helpers.tpl"]
    defined = set(re.findall(r'define "([\w.]+)"', helpers))
    included = {n for text in _templates().values() for n in re.findall(r'include "([\w.]+)"', text)}
    assert included <= defined
    assert defined <= included  # none left unused


def test_chart_metadata_and_notes() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["apiVersion"], chart["name"], chart["type"]) == ("v2", "lakegate", "application")
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert chart["appVersion"] == _values()["image"]["tag"]
    notes = _templates()["NOTES.txt"]
    assert '"addressing_style": "path"' in notes and "--endpoint-url" in notes
    assert "fs.s3a.path.style.access=true" in notes


def test_metrics_auth_has_prometheus_send_the_token_the_nodes_read() -> None:
    """With metricsAuth (off by default, so not in the plain manifests): the ConfigMap turns on
    LAKEGATE_METRICS_AUTH, or the render fails when there is no token; the nodes read the token
    from the file the admin Secret's ``admin-token`` is mounted as; the ServiceMonitor sends the
    same key of the same Secret. Read from the templates' text: no helm here."""
    templates = _templates()
    configmap, statefulset = templates["configmap.yaml"], templates["statefulset.yaml"]
    monitor, secret = templates["servicemonitor.yaml"], templates["secret.yaml"]
    guarded = re.search(r'\{\{- if \.Values\.metricsAuth \}\}\n(.*?)  LAKEGATE_METRICS_AUTH: "true"\n  \{\{- end \}\}',
                        configmap, re.S)
    assert guarded and '{{- fail "metricsAuth needs the admin token' in guarded.group(1)
    assert "LAKEGATE_METRICS_AUTH" not in _by_kind("ConfigMap")["data"]
    token_file = re.search(r"name: LAKEGATE_ADMIN_TOKEN_FILE\n\s+value: (\S+)", statefulset)
    mount = re.search(r"- name: admin-token\n\s+mountPath: (\S+)", statefulset)
    item = re.search(r"secretName: \{\{ include \"lakegate.adminSecretName\" \. \}\}\n\s+defaultMode: 0440\n"
                     r"\s+items:\n\s+- key: admin-token\n\s+path: (\S+)", statefulset)
    assert token_file and mount and item
    assert token_file.group(1) == f"{mount.group(1)}/{item.group(1)}"
    assert statefulset.count('{{- if include "lakegate.adminToken" . }}') == 3  # env, mount, volume
    assert re.search(r"\{\{- if \.Values\.metricsAuth \}\}.*type: Bearer.*"
                     r"name: \{\{ include \"lakegate.adminSecretName\" \. \}\}\n\s+key: admin-token", monitor, re.S)
    assert "admin-token: {{ .Values.admin.token | quote }}" in secret
