"""The chart's PrometheusRule, rendered as a release with the gateway would have it, passes `promtool test rules`
(tests/deploy/alerts.test.yaml: each alert fires on the series that mean trouble and stays quiet on healthy ones),
and every alert has its runbook entry in docs/runbooks.md."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import ROOT, Render, helm_path

TESTS = Path(__file__).resolve().parent / "alerts.test.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"


def promtool_path() -> Path:
    """Where scripts/install-tools.sh puts promtool, beside helm."""
    return helm_path().parent / "promtool"


GATEWAY = {"gateway": {"enabled": True, "auth": {"existingSecret": "gw-key"}}, "config": {"display_topic": "d"}}


def _rules(render: Render) -> list[dict[str, Any]]:
    """The rules of a release with the gateway on, so that the gateway's alerts are among them."""
    [rule] = [o for o in render({"metrics": {"prometheusRule": {"enabled": True}}, **GATEWAY}, release="agui")
              if o["kind"] == "PrometheusRule"]  # fmt: skip
    [group] = rule["spec"]["groups"]
    return list(group["rules"])


def test_every_alert_passes_its_promtool_unit_test(render: Render, tmp_path: Path) -> None:
    promtool = promtool_path()
    if not os.access(promtool, os.X_OK):
        pytest.fail(f"promtool not found at {promtool}: run scripts/install-tools.sh (it builds promtool once)")
    rules = tmp_path / "rules.yaml"
    bare = [{key: value for key, value in rule.items() if key != "annotations"} for rule in _rules(render)]
    rules.write_text(yaml.safe_dump({"groups": [{"name": "harness-agui-worker", "rules": bare}]}, sort_keys=False))
    checked = subprocess.run([str(promtool), "check", "rules", str(rules)], capture_output=True, text=True,
                             timeout=120, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tests = tmp_path / "alerts.test.yaml"
    tests.write_text(TESTS.read_text().replace("  - RULES\n", f"  - {rules}\n"))
    done = subprocess.run([str(promtool), "test", "rules", str(tests)], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_every_alert_has_a_unit_test_and_a_runbook_entry(render: Render) -> None:
    rules = _rules(render)
    alerts = [rule["alert"] for rule in rules]
    tested = set(re.findall(r"alertname: (\w+)", TESTS.read_text()))
    assert set(alerts) == tested
    headings = set(re.findall(r"^### (\w+)$", RUNBOOKS.read_text(), flags=re.M))
    assert set(alerts) == headings


def test_annotations_name_only_labels_the_alert_keeps(render: Render) -> None:
    """A `{{ $labels.x }}` in a summary renders empty unless the expression keeps `x` (its `by (...)`)."""
    for rule in _rules(render):
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        kept = {label.strip() for group in re.findall(r"by \(([^)]*)\)", rule["expr"]) for label in group.split(",")}
        if rule["expr"].startswith("max by") or rule["expr"].startswith("sum by"):
            used = set(re.findall(r"\$labels\.(\w+)", annotations["summary"] + annotations["description"]))
            assert used <= kept, (rule["alert"], used - kept)
        else:
            assert "$labels" not in annotations["summary"] + annotations["description"], rule["alert"]
        assert annotations["description"].endswith(f" See docs/runbooks.md#{rule['alert'].lower()}."), rule["alert"]
