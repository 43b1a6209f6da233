"""The chart's Helm test hook: a pod that runs `python -m worker check` with exactly the worker's settings,
credentials, mounts and resources (the memory it checks is its own cgroup's limit), and that can be turned off."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.conftest import Render
from tests.deploy.test_helm_chart import OPTIONS, by_kind, container, workload


def check_pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    [pod] = by_kind(objs, "Pod")
    return pod


@pytest.mark.parametrize("option", ["defaults", "statefulset", "sasl", "oauth", "ssl", "extras"])
def test_the_check_pod_runs_check_with_the_workers_settings(render: Render, option: str) -> None:
    objs = render(OPTIONS[option])
    pod = check_pod(objs)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["metadata"]["name"].endswith("-check")
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    [check] = spec["containers"]
    worker, template = container(objs), workload(objs)["spec"]["template"]["spec"]
    assert check["args"] == ["check"]
    for field in ("image", "env", "resources", "securityContext", "volumeMounts"):
        assert check[field] == worker[field], field
    assert check.get("envFrom") == worker.get("envFrom")
    assert spec["volumes"] == template["volumes"]
    for field in ("securityContext", "serviceAccountName", "automountServiceAccountToken"):
        assert spec[field] == template[field], field


def test_the_check_pod_can_be_turned_off(render: Render) -> None:
    assert not by_kind(render({"check": {"enabled": False}}), "Pod")
