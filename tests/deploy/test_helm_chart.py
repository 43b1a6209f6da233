"""The Helm chart: lint, render every option, and check the objects against the worker's Settings."""

from __future__ import annotations

import json
import math
import re
import shutil
from typing import Any

import jsonschema
import pytest
import yaml

from devtools.gen_docs import CHART_MANAGED
from tests.deploy.conftest import CHART, ROOT, Render
from worker.settings import Settings

VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
SASL = {
    "config": {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"},
    "kafka": {"sasl": {"existingSecret": "kafka-user", "passwordKey": "pw", "usernameKey": "user"}},
}
OAUTH = {
    "config": {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "oauth_client_id": "worker",
               "oauth_token_endpoint": "https://idp.example/oauth2/token", "oauth_scope": "kafka"},
    "kafka": {"oauth": {"existingSecret": "worker-oidc", "clientSecretKey": "secret"}},
}
SSL = {
    "config": {"security_protocol": "SSL"},
    "kafka": {"ssl": {"existingSecret": "kafka-tls", "caKey": "ca.pem", "certKey": "tls.crt",
                      "keyKey": "tls.key", "keyPasswordKey": "key-pass"}},
}
OPTIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "statefulset": {"workload": {"kind": "StatefulSet"}},
    "servicemonitor": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}},
    "keda": {"keda": {"enabled": True}},
    "keda-statefulset": {"keda": {"enabled": True}, "workload": {"kind": "StatefulSet"}},
    "no-pdb": {"pdb": {"enabled": False}},
    "sasl": SASL,
    "oauth": OAUTH,
    "ssl": SSL,
    "prometheusrule": {"metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "prom"}}}},
    "extras": {
        "extraEnvFrom": [{"configMapRef": {"name": "worker-env"}}],
        "extraVolumes": [{"name": "certs", "configMap": {"name": "ca-bundle"}}],
        "extraVolumeMounts": [{"name": "certs", "mountPath": "/etc/certs", "readOnly": True}],
        "metrics": {"serviceMonitor": {
            "enabled": True,
            "relabelings": [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                             "targetLabel": "node"}],
            "metricRelabelings": [{"action": "drop", "regex": "python_gc_.*", "sourceLabels": ["__name__"]}],
        }},
    },
}
# Settings fields the chart sets outside `config`, with the value that backs them.
HANDLED_ELSEWHERE = CHART_MANAGED


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def workload(objs: list[dict[str, Any]]) -> dict[str, Any]:
    [w] = [o for o in objs if o["kind"] in ("Deployment", "StatefulSet")]
    return w


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    [c] = workload(objs)["spec"]["template"]["spec"]["containers"]
    return c


def env_of(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    env = container(objs)["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), f"duplicate env: {names}"
    return {e["name"]: e for e in env}


def test_lint_strict_for_every_option(helm: Any, tmp_path: Any) -> None:
    for name, values in OPTIONS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values))
        done = helm("lint", "--strict", str(CHART), "-f", str(path), check=False)
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"


def test_defaults_render_a_deployment_with_service_and_pdb(render: Render) -> None:
    objs = render()
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == ["Deployment", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"]  # Pod: `helm test`
    w = workload(objs)
    assert w["spec"]["replicas"] == VALUES["replicaCount"]
    assert w["spec"]["selector"]["matchLabels"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
    assert container(objs)["image"] == f"{VALUES['image']['repository']}:{APP_VERSION}"
    assert container(objs)["args"] == ["run"]


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_worker_env_is_a_settings_field(render: Render, option: str) -> None:
    env = env_of(render(OPTIONS[option]))
    worker_env = [n for n in env if n.startswith("WORKER_")]
    assert worker_env
    for name in worker_env:
        assert name.removeprefix("WORKER_").lower() in Settings.model_fields, name


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_rendered_env_is_accepted_by_settings(render: Render, option: str, monkeypatch: Any) -> None:
    env = env_of(render(OPTIONS[option]))
    for name, entry in env.items():
        if "value" in entry:
            monkeypatch.setenv(name, entry["value"])
        else:  # secret or field references: the kubelet fills these in
            monkeypatch.setenv(name, f"from-{name.lower()}")
    settings = Settings()
    assert settings.rebuild_lookback_ms == VALUES["config"]["rebuild_lookback_ms"]
    assert settings.bootstrap_servers == VALUES["config"]["bootstrap_servers"]
    assert settings.metrics_port == VALUES["metrics"]["port"]


def test_large_integers_are_rendered_as_integers(render: Render) -> None:
    env = env_of(render({"config": {"rebuild_lookback_ms": 604_800_000, "max_open_streams": 2_000_000}}))
    assert env["WORKER_REBUILD_LOOKBACK_MS"]["value"] == "604800000"
    assert env["WORKER_MAX_OPEN_STREAMS"]["value"] == "2000000"


def test_null_config_keys_leave_the_worker_default(render: Render) -> None:
    env = env_of(render({"config": {"log_level": None, "gap_policy": None}}))
    assert "WORKER_LOG_LEVEL" not in env and "WORKER_GAP_POLICY" not in env
    assert "WORKER_SASL_MECHANISM" not in env  # null in values.yaml


def test_schema_config_mirrors_settings() -> None:
    config = SCHEMA["properties"]["config"]
    assert config["additionalProperties"] is False
    fields = set(Settings.model_fields)
    assert set(config["properties"]) | set(HANDLED_ELSEWHERE) == fields
    assert not set(config["properties"]) & set(HANDLED_ELSEWHERE)
    model = Settings.model_json_schema()
    for name, prop in config["properties"].items():
        want = model["properties"][name]
        if "$ref" in want:
            want = model["$defs"][want["$ref"].split("/")[-1]]
        options = [a for a in want.get("anyOf", [want]) if a.get("type") != "null"]
        [inner] = options
        if "enum" in inner:
            assert [e for e in prop["enum"] if e is not None] == inner["enum"], name
        for bound in ("minimum", "maximum"):
            assert prop.get(bound) == inner.get(bound), (name, bound)
        assert inner["type"] in prop["type"], name


def test_values_yaml_passes_its_schema_and_settings() -> None:
    jsonschema.validate(VALUES, SCHEMA)
    config = {k: v for k, v in VALUES["config"].items() if v is not None}
    Settings(**config)


@pytest.mark.parametrize(
    "bad",
    [
        {"config": {"sesion_timeout_ms": 1000}},
        {"config": {"gap_policy": "skip"}},
        {"config": {"commit_interval_ms": 0}},
        {"config": {"group_instance_id": "fixed"}},
        {"config": {"sasl_password": "plaintext-in-values"}},
        {"metrics": {"port": 0}},
        {"workload": {"kind": "DaemonSet"}},
        {"image": {"digest": "latest"}},
    ],
)
def test_schema_refuses_bad_values(render_error: Any, bad: dict[str, Any]) -> None:
    assert "values don't meet the specifications of the schema" in render_error(bad)


def test_probes_use_the_metrics_port_and_health_paths(render: Render) -> None:
    objs = render({"metrics": {"port": 9999}})
    c = container(objs)
    [port] = c["ports"]
    assert (port["name"], port["containerPort"]) == ("metrics", 9999)
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert c["startupProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert env_of(objs)["WORKER_METRICS_PORT"]["value"] == "9999"
    [svc] = by_kind(objs, "Service")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9999, "targetPort": "metrics", "protocol": "TCP"}]
    assert svc["spec"]["selector"].items() <= workload(objs)["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["publishNotReadyAddresses"] is True  # rebuilding pods are scraped too


@pytest.mark.parametrize("option", ["defaults", "statefulset"])
def test_security_context_is_restrictive(render: Render, option: str) -> None:
    objs = render(OPTIONS[option])
    pod = workload(objs)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    sc = container(objs)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in container(objs)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


@pytest.mark.parametrize(
    ("commit_ms", "shutdown_ms"), [(None, None), (100, 20_000), (5_000, 60_000), (60_000, 100)]
)
def test_grace_period_outlasts_commit_and_shutdown(render: Render, commit_ms: int | None,
                                                   shutdown_ms: int | None) -> None:
    config = {"commit_interval_ms": commit_ms, "shutdown_timeout_ms": shutdown_ms}
    objs = render({"config": config})
    grace = workload(objs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    defaults = Settings.model_fields
    commit = commit_ms if commit_ms is not None else defaults["commit_interval_ms"].default
    shutdown = shutdown_ms if shutdown_ms is not None else defaults["shutdown_timeout_ms"].default
    assert grace > (commit + shutdown) / 1000
    assert grace >= math.ceil((commit + shutdown) / 1000) + 5  # room for the process to exit


def test_explicit_grace_period_is_checked(render: Render, render_error: Any) -> None:
    objs = render({"terminationGracePeriodSeconds": 120})
    assert workload(objs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 120
    err = render_error({"terminationGracePeriodSeconds": 20})
    assert "terminationGracePeriodSeconds (20) must exceed" in err


def test_statefulset_uses_static_membership_from_the_pod_name(render: Render) -> None:
    objs = render(OPTIONS["statefulset"])
    sts = workload(objs)
    assert sts["kind"] == "StatefulSet"
    assert not by_kind(objs, "Deployment")
    env = env_of(objs)
    assert env["WORKER_GROUP_INSTANCE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    headless = [s for s in by_kind(objs, "Service") if s["metadata"]["name"] == sts["spec"]["serviceName"]]
    assert headless and headless[0]["spec"]["clusterIP"] == "None"
    off = render({"workload": {"kind": "StatefulSet", "staticMembership": False}})
    assert "WORKER_GROUP_INSTANCE_ID" not in env_of(off)
    assert "WORKER_GROUP_INSTANCE_ID" not in env_of(render())  # Deployment pod names are not stable


@pytest.mark.parametrize(("partitions", "asked", "expected"), [(12, None, 12), (6, 50, 6), (12, 3, 3)])
def test_keda_scales_on_lag_and_never_beyond_the_partitions(
    render: Render, partitions: int, asked: int | None, expected: int
) -> None:
    objs = render({"partitionCount": partitions, "replicaCount": 1,
                   "keda": {"enabled": True, "maxReplicaCount": asked, "lagThreshold": 250}})
    [so] = by_kind(objs, "ScaledObject")
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    assert so["spec"]["maxReplicaCount"] == expected
    w = workload(objs)
    assert "replicas" not in w["spec"]  # KEDA's HPA owns the replica count
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": w["kind"],
                                            "name": w["metadata"]["name"]}
    [trigger] = so["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert meta["bootstrapServers"] == VALUES["config"]["bootstrap_servers"]
    assert meta["consumerGroup"] == VALUES["config"]["group_id"]
    assert meta["topic"] == VALUES["config"]["source_topic"]
    assert meta["lagThreshold"] == "250"
    assert all(isinstance(v, str) for v in meta.values())


def test_keda_refuses_a_minimum_above_the_cap(render_error: Any) -> None:
    err = render_error({"partitionCount": 2, "keda": {"enabled": True, "minReplicaCount": 3}})
    assert "keda.minReplicaCount (3) exceeds the replica cap (2" in err


def test_keda_with_trigger_authentication(render: Render) -> None:
    objs = render({"keda": {"enabled": True, "authenticationRef": "kafka-auth"}})
    [so] = by_kind(objs, "ScaledObject")
    assert so["spec"]["triggers"][0]["authenticationRef"] == {"name": "kafka-auth"}


def test_replicas_beyond_partitions_are_refused(render_error: Any) -> None:
    assert "replicaCount (5) exceeds partitionCount (4)" in render_error({"replicaCount": 5, "partitionCount": 4})


def test_service_monitor_scrapes_the_metrics_service(render: Render, render_error: Any) -> None:
    objs = render(OPTIONS["servicemonitor"])
    [sm] = by_kind(objs, "ServiceMonitor")
    [svc] = by_kind(objs, "Service")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["streams"]}
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert "needs metrics.service.enabled" in render_error(
        {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}}
    )


def test_pdb_selects_the_pods_and_can_be_disabled(render: Render) -> None:
    objs = render({"pdb": {"maxUnavailable": 2}})
    [pdb] = by_kind(objs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 2
    pod_labels = workload(objs)["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert not by_kind(render(OPTIONS["no-pdb"]), "PodDisruptionBudget")


def test_sasl_credentials_come_from_the_secret(render: Render) -> None:
    objs = render(SASL)
    env = env_of(objs)
    assert env["WORKER_SASL_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "kafka-user", "key": "pw"}}
    assert env["WORKER_SASL_USERNAME"]["valueFrom"] == {"secretKeyRef": {"name": "kafka-user", "key": "user"}}
    assert env["WORKER_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    for name, entry in env.items():
        if "PASSWORD" in name:
            assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], name


def test_sasl_needs_a_secret_and_a_mechanism(render_error: Any) -> None:
    err = render_error({"config": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}})
    assert "needs kafka.sasl.existingSecret" in err
    err = render_error({"config": {"security_protocol": "SASL_PLAINTEXT"}})
    assert "needs config.sasl_mechanism" in err


def test_the_oidc_client_secret_comes_from_the_secret(render: Render) -> None:
    env = env_of(render(OAUTH))
    assert env["WORKER_OAUTH_CLIENT_SECRET"]["valueFrom"] == {"secretKeyRef": {"name": "worker-oidc", "key": "secret"}}
    assert env["WORKER_SASL_MECHANISM"]["value"] == "OAUTHBEARER"
    assert env["WORKER_OAUTH_TOKEN_ENDPOINT"]["value"] == "https://idp.example/oauth2/token"
    assert env["WORKER_OAUTH_CLIENT_ID"]["value"] == "worker"
    assert "WORKER_SASL_PASSWORD" not in env
    assert "WORKER_OAUTH_CLIENT_SECRET" not in env_of(render(SASL))


def test_oauthbearer_needs_an_endpoint_a_client_and_a_secret(render_error: Any) -> None:
    config = {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}
    assert "needs config.oauth_token_endpoint and config.oauth_client_id" in render_error({"config": config})
    config |= {"oauth_token_endpoint": "https://idp.example/token", "oauth_client_id": "w"}
    assert "needs kafka.oauth.existingSecret" in render_error({"config": config})


@pytest.mark.parametrize("secret", ["sasl_password", "ssl_password", "oauth_client_secret"])
def test_config_refuses_a_secret_in_values(render_error: Any, secret: str) -> None:
    assert render_error({"config": {secret: "plaintext-in-values"}})


def test_tls_files_are_mounted_from_the_secret(render: Render) -> None:
    objs = render(SSL)
    env = env_of(objs)
    c = container(objs)
    [mount] = [m for m in c["volumeMounts"] if m["name"] == "kafka-tls"]
    assert mount["readOnly"] is True
    pod = workload(objs)["spec"]["template"]["spec"]
    [vol] = [v for v in pod["volumes"] if v["name"] == "kafka-tls"]
    assert vol["secret"]["secretName"] == "kafka-tls"
    base = mount["mountPath"]
    assert env["WORKER_SSL_CAFILE"]["value"] == f"{base}/ca.pem"
    assert env["WORKER_SSL_CERTFILE"]["value"] == f"{base}/tls.crt"
    assert env["WORKER_SSL_KEYFILE"]["value"] == f"{base}/tls.key"
    assert env["WORKER_SSL_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "kafka-tls", "key": "key-pass"}}
    assert not any(m["name"] == "kafka-tls" for m in container(render())["volumeMounts"])


def test_image_digest_wins_over_tag(render: Render) -> None:
    digest = "sha256:" + "a" * 64
    c = container(render({"image": {"tag": "1.2.3", "digest": digest}}))
    assert c["image"] == f"{VALUES['image']['repository']}@{digest}"
    assert container(render({"image": {"tag": "1.2.3"}}))["image"].endswith(":1.2.3")


RECOMMENDED_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                      "app.kubernetes.io/component", "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by")


@pytest.mark.parametrize("option", ["defaults", "statefulset", "keda", "servicemonitor", "prometheusrule"])
def test_every_object_and_pod_carries_the_recommended_labels(render: Render, option: str) -> None:
    objs = render(OPTIONS[option])
    for obj in [*objs, workload(objs)["spec"]["template"]]:
        labels = obj["metadata"]["labels"]
        missing = [k for k in RECOMMENDED_LABELS if k not in labels]
        assert not missing, (obj.get("kind", "pod template"), missing)
        assert labels["app.kubernetes.io/version"] == APP_VERSION


def test_chart_names_its_home_and_sources() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["home"].startswith("https://") and chart["sources"] and chart["appVersion"] == chart["version"]


def test_extra_env_from_volumes_and_mounts_reach_the_pod(render: Render) -> None:
    objs = render(OPTIONS["extras"])
    c = container(objs)
    assert c["envFrom"] == [{"configMapRef": {"name": "worker-env"}}]
    pod = workload(objs)["spec"]["template"]["spec"]
    assert {"name": "certs", "configMap": {"name": "ca-bundle"}} in pod["volumes"]
    assert {"name": "certs", "mountPath": "/etc/certs", "readOnly": True} in c["volumeMounts"]
    assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"])  # the chart's own mounts stay
    assert "envFrom" not in container(render())


def test_service_monitor_relabelings(render: Render) -> None:
    [sm] = by_kind(render(OPTIONS["extras"]), "ServiceMonitor")
    [endpoint] = sm["spec"]["endpoints"]
    assert endpoint["relabelings"][0]["targetLabel"] == "node"
    assert endpoint["metricRelabelings"][0]["action"] == "drop"
    [plain] = by_kind(render(OPTIONS["servicemonitor"]), "ServiceMonitor")
    assert "relabelings" not in plain["spec"]["endpoints"][0]


def test_prometheus_rule_carries_the_alerts_of_the_runbooks(render: Render) -> None:
    objs = render(OPTIONS["prometheusrule"])
    [rule] = by_kind(objs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prom"
    [group] = rule["spec"]["groups"]
    summary = (ROOT / "docs" / "runbooks.md").read_text().split("## Runbooks", 1)[0]
    listed = re.findall(r"^\| (HarnessAgui\w+) \|", summary, flags=re.M)
    # The gateway's alerts join only with the gateway (tests/deploy/test_helm_gateway.py).
    listed = [alert for alert in listed if not alert.startswith("HarnessAguiGateway")]
    assert sorted(r["alert"] for r in group["rules"]) == sorted(listed)
    for r in group["rules"]:
        assert 'namespace="streams"' in r["expr"] and 'pod=~"rel-harness-agui-worker-.*"' in r["expr"], r["alert"]
    critical = {"HarnessAguiWorkersAbsent", "HarnessAguiAuthenticationFailing"}
    assert all(r["labels"]["severity"] == ("critical" if r["alert"] in critical else "warning")
               and r["annotations"]["summary"] for r in group["rules"])  # fmt: skip
    custom = render({"metrics": {"prometheusRule": {"enabled": True, "selector": 'job="w"', "additionalRules": [
        {"alert": "Mine", "expr": "vector(1)"}]}}})
    [rule] = by_kind(custom, "PrometheusRule")
    rules = rule["spec"]["groups"][0]["rules"]
    assert rules[-1] == {"alert": "Mine", "expr": "vector(1)"}
    assert all('job="w"' in r["expr"] for r in rules[:-1])
    assert not by_kind(render(), "PrometheusRule")


def test_notes_render_the_release(helm: Any, tmp_path: Any) -> None:
    """NOTES.txt is rendered only by install; a copy of the chart renders it into a ConfigMap to check it."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes_probe.tpl").write_text(
        '{{- define "probe.notes" -}}' + notes + "{{- end -}}")
    (chart / "templates" / "notes-probe.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n'
        '  notes: {{ include "probe.notes" . | toJson }}\n')
    for kind in ("Deployment", "StatefulSet"):
        out = helm("template", "rel", str(chart), "-n", "streams", "--set", f"workload.kind={kind}",
                   "--show-only", "templates/notes-probe.yaml").stdout
        text = yaml.safe_load(out)["data"]["notes"]
        assert f"port-forward {kind.lower()}/rel-harness-agui-worker 9464" in text
        assert '"harness.events"' in text and "read_committed" in text


def test_grace_period_defaults_are_the_settings_defaults() -> None:
    """The chart computes the grace period from two settings; where values leave them null it uses these."""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    for name in ("commit_interval_ms", "shutdown_timeout_ms"):
        [default] = re.findall(rf'"key" "{name}" "default" (\d+)', helpers)
        assert int(default) == Settings.model_fields[name].default, name


def test_the_chart_defaults_fit_the_measured_sizing() -> None:
    """A pod that ends up owning every partition, each at the chart's open-run cap, fits the chart's memory limit
    with the per-run and per-partition figures of docs/sizing.md (those the worker warns with at start)."""
    from worker.ops.capacity import WorstCase  # noqa: PLC0415

    config = VALUES["config"]
    limit = VALUES["resources"]["limits"]["memory"]
    assert limit.endswith("Gi")
    worst = WorstCase(VALUES["partitionCount"], config["max_open_streams"], config["closed_stream_memory"],
                      display=bool(config.get("display_topic")))  # fmt: skip
    assert worst.warning(int(limit[:-2]) << 30) is None, worst.warning(int(limit[:-2]) << 30)
