"""The chart's PrometheusRule, rendered as a release would have it, passes `promtool test rules`
(tests/deploy/alerts.test.yaml: each alert fires on the series that mean trouble and stays quiet on healthy ones),
and every alert has its runbook entry in docs/runbooks.md."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import ROOT, Render, helm_path

TESTS = Path(__file__).resolve().parent / "alerts.test.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"


def promtool_path() -> Path:
    """Where scripts/install-tools.sh puts promtool, beside helm."""
    return helm_path().parent / "promtool"


def _rules(render: Render) -> dict[str, object]:
    [rule] = [o for o in render({"metrics": {"prometheusRule": {"enabled": True}}}, release="agui")
              if o["kind"] == "PrometheusRule"]  # fmt: skip
    return {"groups": rule["spec"]["groups"]}


def test_every_alert_passes_its_promtool_unit_test(render: Render, tmp_path: Path) -> None:
    promtool = promtool_path()
    if not os.access(promtool, os.X_OK):
        pytest.fail(f"promtool not found at {promtool}: run scripts/install-tools.sh (it builds promtool once)")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(_rules(render), sort_keys=False))
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
    [group] = _rules(render)["groups"]  # type: ignore[misc]
    alerts = [rule["alert"] for rule in group["rules"]]
    tested = set(re.findall(r"alertname: (\w+)", TESTS.read_text()))
    assert set(alerts) == tested
    headings = set(re.findall(r"^### (\w+)$", RUNBOOKS.read_text(), flags=re.M))
    assert set(alerts) == headings
    for rule in group["rules"]:
        anchor = rule["alert"].lower()
        if "docs/runbooks.md#" in rule["annotations"]["description"]:
            assert f"docs/runbooks.md#{anchor}." in rule["annotations"]["description"]
