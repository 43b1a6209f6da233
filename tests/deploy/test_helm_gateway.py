"""The chart's gateway: off by default; on, a Deployment, Service and optional Ingress beside the worker, with the
worker's broker settings, a mounted token key, probes on the metrics port, and env the gateway's settings accept."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.conftest import Render
from worker.gateway import GatewaySettings

ON = {"gateway": {"enabled": True, "auth": {"existingSecret": "gw-key"},
                  "config": {"display_topic": "agui.display", "cors_origins": "https://app.example"}},
      "config": {"display_topic": "agui.display"}}  # fmt: skip


def _named(objs: list[dict[str, Any]], kind: str, suffix: str = "-gateway") -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


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
