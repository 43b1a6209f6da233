"""The chart's gateway: off by default; on, a Deployment, Service and optional Ingress beside the worker, with the
worker's broker settings, a mounted token key, probes on the metrics port, and env the gateway's settings accept;
its pods advertise their IP to each other, and it has its own PodDisruptionBudget, ServiceMonitor, alerts, spread
and group."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.gen_docs import CHART_MANAGED
from tests.deploy.conftest import CHART, ROOT, Render
from worker.gateway import GatewaySettings

Helm = Callable[..., subprocess.CompletedProcess[str]]

ON = {"gateway": {"enabled": True, "auth": {"existingSecret": "gw-key"},
                  "config": {"display_topic": "agui.display", "cors_origins": "https://app.example"}},
      "config": {"display_topic": "agui.display"}}  # fmt: skip


def _named(objs: list[dict[str, Any]], kind: str, suffix: str = "-gateway") -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def _with(**gateway: Any) -> dict[str, Any]:
    """ON with more gateway values."""
    return {**ON, "gateway": {**ON["gateway"], **gateway}}


def _gateway_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = _named(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def _settings(container: dict[str, Any], monkeypatch: pytest.MonkeyPatch, pod_ip: str = "10.1.2.3") -> GatewaySettings:
    """The gateway's settings from its rendered environment, `$(NAME)` expanded from earlier variables as the
    kubelet does (the downward API's pod IP as `pod_ip`), the mounted key file aside."""
    seen: dict[str, str] = {}
    for entry in container["env"]:
        if entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
            seen[entry["name"]] = pod_ip
        elif "value" in entry:
            seen[entry["name"]] = re.sub(r"\$\((\w+)\)", lambda m: seen.get(m[1], m[0]), entry["value"])
    for name, value in seen.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WORKER_AUTH_KEY_FILE", "/dev/null")
    return GatewaySettings()


def test_the_gateway_is_off_by_default(render: Render) -> None:
    assert not [o for o in render() if o["metadata"]["name"].endswith("-gateway")]


def test_the_gateway_deploys_beside_the_worker(render: Render, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = render(ON)
    worker = [o for o in objs if o["kind"] == "Deployment" and not o["metadata"]["name"].endswith("-gateway")]
    assert len(worker) == 1
    gateway = _named(objs, "Deployment")
    pod = gateway["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["args"] == ["gateway"]
    assert container["image"] == worker[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    for probe, path in (("startupProbe", "/livez"), ("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}
    env = {e["name"]: e for e in container["env"]}
    assert env["WORKER_AUTH_KEY_FILE"]["value"] == "/etc/harness-agui-worker/gateway-auth/key"
    assert env["WORKER_AUTH_KEYS_DIR"]["value"] == "/etc/harness-agui-worker/gateway-auth"  # rotation by kid
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["gateway-auth"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["gateway-auth"]["secret"]["secretName"] == "gw-key"
    # The rendered environment is what the gateway's settings accept (the key file aside, which is mounted).
    for name, entry in env.items():
        if "value" in entry:
            monkeypatch.setenv(name, entry["value"])
    monkeypatch.setenv("WORKER_AUTH_KEY_FILE", "/dev/null")
    settings = GatewaySettings()
    assert settings.display_topic == "agui.display" and settings.http_port == 8080
    assert settings.allowed_origins == ("https://app.example",)
    # Selectors never overlap: the worker's do not pick the gateway's pods, nor the other way round.
    labels = pod["metadata"]["labels"]
    assert not worker[0]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = _named(objs, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert {p["name"] for p in service["spec"]["ports"]} == {"http", "metrics"}


def test_the_gateway_connects_as_the_worker_does_each_variable_once(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount = {"name": "kafka-login", "mountPath": "/etc/kafka-login", "readOnly": True}
    values = {
        "config": {"display_topic": "agui.display", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                   "sasl_username": "streams", "sasl_password_file": "/etc/kafka-login/password"},
        "kafka": {"ssl": {"existingSecret": "kafka-ca", "caKey": "ca.pem"}},
        "extraVolumes": [{"name": "kafka-login", "secret": {"secretName": "login-files"}}],
        "extraVolumeMounts": [mount],
        "gateway": {"enabled": True, "auth": {"existingSecret": "gw-key"},
                    "config": {"max_connections": 20_000_000, "log_level": "DEBUG"}},
    }  # fmt: skip
    objs = render(values)
    pods = {o["metadata"]["name"].endswith("-gateway"): o["spec"]["template"]["spec"]
            for o in objs if o["kind"] == "Deployment"}  # fmt: skip
    (gateway,), (worker,) = pods[True]["containers"], pods[False]["containers"]
    names = [e["name"] for e in gateway["env"]]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    env = {e["name"]: e for e in gateway["env"]}
    worker_env = {e["name"]: e for e in worker["env"]}
    for name in ("WORKER_BOOTSTRAP_SERVERS", "WORKER_SECURITY_PROTOCOL", "WORKER_SASL_MECHANISM",
                 "WORKER_SASL_USERNAME", "WORKER_SASL_PASSWORD_FILE", "WORKER_SSL_CAFILE", "WORKER_CLIENT_ID"):
        assert env[name] == worker_env[name], name
    assert env["WORKER_DISPLAY_TOPIC"]["value"] == "agui.display"  # the worker's, as gateway.config leaves it empty
    assert env["WORKER_LOG_LEVEL"]["value"] == "DEBUG"  # gateway.config wins over config
    for volume in ("kafka-login", "kafka-tls"):  # the password file and the CA reach the gateway as the worker
        (worker_mount,) = [m for m in worker["volumeMounts"] if m["name"] == volume]
        assert worker_mount in gateway["volumeMounts"]
        (worker_volume,) = [v for v in pods[False]["volumes"] if v["name"] == volume]
        assert worker_volume in pods[True]["volumes"]
    assert "WORKER_GROUP_INSTANCE_ID" not in names
    for name, entry in env.items():
        if "value" in entry:
            monkeypatch.setenv(name, entry["value"])
    settings = GatewaySettings()
    assert settings.max_connections == 20_000_000 and settings.sasl_username == "streams"
    assert settings.fetch_max_wait_ms == 50  # the gateway's own, not the worker's fetch wait


def test_the_gateway_ingress_routes_runs_and_the_viewer(render: Render) -> None:
    values = {**ON, "gateway": {**ON["gateway"], "ingress": {"enabled": True, "host": "runs.example",
                                                             "className": "nginx"}}}  # fmt: skip
    ingress = _named(render(values), "Ingress")
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "runs.example"
    assert [p["path"] for p in rule["http"]["paths"]] == ["/runs", "/view"]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"


def test_the_gateway_with_an_identity_provider_needs_no_secret(render: Render) -> None:
    idp = {"auth_jwks_url": "https://idp.example/jwks", "auth_audience": "agui", "auth_issuer": "https://idp.example"}
    gateway = _named(render({"gateway": {"enabled": True, "config": {"display_topic": "d", **idp}}}), "Deployment")
    env = {e["name"]: e.get("value") for e in gateway["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WORKER_AUTH_JWKS_URL"] == idp["auth_jwks_url"] and "WORKER_AUTH_KEY_FILE" not in env
    assert "WORKER_INSECURE_NO_AUTH" not in env


@pytest.mark.parametrize("values", [
    {"gateway": {"enabled": True, "config": {"display_topic": "d"}}},
    {"gateway": {"enabled": True, "auth": {"existingSecret": "k"}, "config": {"display_topic": ""}},
     "config": {"display_topic": None}},
])  # fmt: skip
def test_the_gateway_needs_a_key_and_the_display_topic(render_error: Any, values: dict[str, Any]) -> None:
    assert "gateway" in render_error(values)


def test_each_replica_advertises_its_pod_ip(render: Render, monkeypatch: pytest.MonkeyPatch) -> None:
    container = _gateway_container(render(_with(port=9000)))
    first = container["env"][0]  # before every variable that may name it
    assert first == {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    env = {e["name"]: e for e in container["env"]}
    assert env["WORKER_ADVERTISED_URL"]["value"] == "http://$(POD_IP):9000"
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["http"] == 9000
    assert _settings(container, monkeypatch).peer_url == "http://10.1.2.3:9000"


def test_an_advertised_url_in_values_wins(render: Render, monkeypatch: pytest.MonkeyPatch) -> None:
    values = _with(config={**ON["gateway"]["config"], "advertised_url": "http://[$(POD_IP)]:8080"})
    container = _gateway_container(render(values))
    assert [e["value"] for e in container["env"] if e["name"] == "WORKER_ADVERTISED_URL"] == [
        "http://[$(POD_IP)]:8080"]
    assert _settings(container, monkeypatch, pod_ip="fd00::7").peer_url == "http://[fd00::7]:8080"


def test_the_gateway_group_and_its_session_are_the_gateway_s_own(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(_gateway_container(render(ON)), monkeypatch)
    assert settings.group == "harness-agui-gateway.agui.events"
    # The worker's config.session_timeout_ms (45 s) would keep a killed replica's partitions beyond forward_wait_ms.
    defaults = GatewaySettings.model_fields
    assert settings.session_timeout_ms == defaults["session_timeout_ms"].default < settings.forward_wait_ms
    assert settings.forward_wait_ms == defaults["forward_wait_ms"].default
    named = _with(config={**ON["gateway"]["config"], "gateway_group_id": "agui-gateway-blue"})
    assert _settings(_gateway_container(render(named)), monkeypatch).group == "agui-gateway-blue"


def test_a_session_longer_than_the_forward_wait_is_refused(render_error: Any) -> None:
    values = _with(config={**ON["gateway"]["config"], "session_timeout_ms": 45_000})
    assert "session_timeout_ms (45000) must be below gateway.config.forward_wait_ms (30000)" in render_error(values)


def test_the_gateway_has_its_own_probes(render: Render) -> None:
    objs = render({**_with(probes={"readiness": {"periodSeconds": 2, "failureThreshold": 1}}),
                   "probes": {"readiness": {"periodSeconds": 9}}})  # fmt: skip
    readiness = _gateway_container(objs)["readinessProbe"]
    assert readiness == {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 2, "failureThreshold": 1,
                         "timeoutSeconds": 3}
    (worker,) = [o for o in objs if o["kind"] == "Deployment" and o is not _named(objs, "Deployment")]
    assert worker["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSeconds"] == 9
    defaults = _gateway_container(render(ON))
    assert defaults["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert defaults["startupProbe"]["failureThreshold"] == 60


def test_a_drain_takes_one_gateway_replica_at_a_time(render: Render) -> None:
    objs = render(ON)
    pdb = _named(objs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = _named(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    worker_pdb = _named(objs, "PodDisruptionBudget", suffix="-worker")
    assert not worker_pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert _named(render(_with(pdb={"maxUnavailable": "50%"})), "PodDisruptionBudget")["spec"]["maxUnavailable"] \
        == "50%"  # fmt: skip
    assert not [o for o in render(_with(pdb={"enabled": False})) if o["kind"] == "PodDisruptionBudget"
                and o["metadata"]["name"].endswith("-gateway")]  # fmt: skip


def test_the_gateway_is_scraped_when_the_worker_is(render: Render) -> None:
    relabel = [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    monitor = {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}, "relabelings": relabel}}
    objs = render({**ON, "metrics": monitor})
    watched = _named(objs, "ServiceMonitor")
    service = _named(objs, "Service")
    assert watched["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = watched["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics" and endpoint["relabelings"] == relabel
    assert "metrics" in {p["name"] for p in service["spec"]["ports"]}
    assert watched["metadata"]["labels"]["release"] == "prom"
    worker = _named(objs, "ServiceMonitor", suffix="-worker")
    assert not worker["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [o["metadata"]["name"] for o in render(ON) if o["kind"] == "ServiceMonitor"] == []
    alone = render({"metrics": monitor})
    assert [o["metadata"]["name"] for o in alone if o["kind"] == "ServiceMonitor"] == ["rel-harness-agui-worker"]


def test_replicas_spread_over_nodes_and_take_affinity(render: Render) -> None:
    pod = _named(render(ON), "Deployment")["spec"]["template"]
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert "affinity" not in pod["spec"]
    zone = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"tier": "edge"}}}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["edge"]}]}]}}}
    objs = render({**_with(topologySpreadConstraints=[zone], affinity=affinity),
                   "affinity": {"podAntiAffinity": {}}, "topologySpreadConstraints": []})  # fmt: skip
    spec = _named(objs, "Deployment")["spec"]["template"]["spec"]
    assert spec["topologySpreadConstraints"] == [zone]  # a selector of its own is kept
    assert spec["affinity"] == affinity  # the gateway's, not the worker's
    assert "topologySpreadConstraints" not in _named(render(_with(topologySpreadConstraints=[])), "Deployment")[
        "spec"]["template"]["spec"]


def test_the_gateway_alerts_join_the_rule_with_the_gateway(render: Render) -> None:
    rule = {"metrics": {"prometheusRule": {"enabled": True}}}
    summary = (ROOT / "docs" / "runbooks.md").read_text().split("## Runbooks", 1)[0]
    listed = set(re.findall(r"^\| (HarnessAguiGateway\w+) \|", summary, flags=re.M))
    assert listed == {"HarnessAguiGatewayAbsent", "HarnessAguiGatewayPartitionsUnserved",
                      "HarnessAguiGatewayTailBehind", "HarnessAguiGatewayForwardingFailing",
                      "HarnessAguiGatewaySlowClientDrops", "HarnessAguiGatewayThreadNoticeSlow"}

    def alerts(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
        (found,) = [o for o in render(values) if o["kind"] == "PrometheusRule"]
        return {r["alert"]: r for r in found["spec"]["groups"][0]["rules"]}

    assert not listed & set(alerts(rule))
    gateway = {name: r for name, r in alerts({**ON, **rule}).items() if name.startswith("HarnessAguiGateway")}
    assert set(gateway) == listed
    assert gateway["HarnessAguiGatewayAbsent"]["labels"]["severity"] == "critical"
    for alert in gateway.values():
        assert 'pod=~"rel-harness-agui-worker-.*"' in alert["expr"], alert["alert"]  # the gateway's pods match it
    assert gateway["HarnessAguiGatewayPartitionsUnserved"]["for"] == "5m"


def test_gateway_config_takes_the_gateway_s_settings_only(render_error: Any) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    named = set(schema["properties"]["gateway"]["properties"]["config"]["propertyNames"]["enum"])
    set_by_chart = {"http_port", "drain_timeout_ms", "auth_key_file", "auth_keys_dir", "insecure_no_auth",
                    *CHART_MANAGED}
    assert named == set(GatewaySettings.model_fields) - set_by_chart
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values["gateway"]["config"]) <= named
    refused = render_error(_with(config={**ON["gateway"]["config"], "gateway_grup_id": "g"}))
    assert "values don't meet the specifications of the schema" in refused


def test_lint_strict_with_every_gateway_object(helm: Helm, tmp_path: Path) -> None:
    values = {**_with(ingress={"enabled": True, "host": "runs.example"}),
              "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}  # fmt: skip
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(values))
    done = helm("lint", "--strict", str(CHART), "-f", str(path), check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_notes_tell_the_gateway_s_group_and_address(helm: Helm, tmp_path: Path) -> None:
    """NOTES.txt is rendered only by install; a copy of the chart renders it into a ConfigMap to check it."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes_probe.tpl").write_text('{{- define "probe.notes" -}}' + notes + "{{- end -}}")
    (chart / "templates" / "notes-probe.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n'
        '  notes: {{ include "probe.notes" . | toJson }}\n')

    def rendered(values: dict[str, Any]) -> str:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        out = helm("template", "rel", str(chart), "-n", "streams", "-f", str(path),
                   "--show-only", "templates/notes-probe.yaml").stdout  # fmt: skip
        return str(yaml.safe_load(out)["data"]["notes"])

    assert "Gateway" not in rendered({})
    text = rendered(_with(config={**ON["gateway"]["config"], "gateway_group_id": "agui-gateway-blue"},
                          ingress={"enabled": True, "host": "runs.example", "tls": [{"hosts": ["runs.example"]}]}))
    assert 'consumer group "agui-gateway-blue"' in text and "Read on that group" in text
    assert "https://runs.example" in text and "port 8080" in text
    assert "--auth-key-file <the key in Secret gw-key>" in text
    assert 'consumer group "harness-agui-gateway.agui.events"' in rendered(ON)
    assert "WARNING: gateway.auth.insecureNoAuth" in rendered(
        {**ON, "gateway": {**ON["gateway"], "auth": {"insecureNoAuth": True}}})


def test_helm_test_checks_the_gateway_with_its_own_settings(render: Render, monkeypatch: pytest.MonkeyPatch) -> None:
    ssl = {"kafka": {"ssl": {"existingSecret": "kafka-ca"}}, "extraEnvFrom": [{"secretRef": {"name": "more"}}],
           "config": {**ON["config"], "security_protocol": "SSL"}}
    objs = render({**ON, **ssl})
    (pod,) = [o for o in objs if o["kind"] == "Pod" and o["metadata"]["name"].endswith("-gateway-check")]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (check,) = pod["spec"]["containers"]
    gateway = _gateway_container(objs)
    template = _named(objs, "Deployment")["spec"]["template"]["spec"]
    assert check["args"] == ["gateway", "check"]
    for field in ("image", "env", "envFrom", "resources", "securityContext", "volumeMounts"):
        assert check[field] == gateway[field], field
    assert pod["spec"]["volumes"] == template["volumes"]
    assert _settings(check, monkeypatch).group == "harness-agui-gateway.agui.events"
    assert not [o for o in render({**ON, "check": {"enabled": False}}) if o["kind"] == "Pod"]
    assert [o["metadata"]["name"] for o in render() if o["kind"] == "Pod"] == ["rel-harness-agui-worker-check"]
