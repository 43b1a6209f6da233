"""The README documents what the code has: every setting, every metric, the two quick-start commands."""

from __future__ import annotations

import re
from pathlib import Path

from worker.ops import Metrics
from worker.settings import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def readme_metric_names() -> list[str]:
    return re.findall(r"^\| `(harness_agui_[a-z_]+)` \|", _section("Metrics"), flags=re.M)


def test_configuration_table_lists_every_setting_with_flag_and_env() -> None:
    table = _section("Configuration")
    for name in Settings.model_fields:
        flag, env = "--" + name.replace("_", "-"), f"WORKER_{name.upper()}"
        assert re.search(rf"^\| `{flag}` \| `{env}` \|", table, flags=re.M), f"{name} is not documented"


def test_metrics_table_matches_the_registry() -> None:
    documented = set(readme_metric_names())
    exposition = Metrics().render().decode()
    exposed = set(re.findall(r"^# TYPE (harness_agui_[a-z_]+) ", exposition, flags=re.M))
    # prometheus-client names a counter family without its `_total` suffix.
    exposed = {n if n in documented else f"{n}_total" for n in exposed}
    assert documented == exposed


def test_quick_start_is_two_commands_that_exist() -> None:
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", README, flags=re.S)
    assert block is not None
    commands = [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]
    assert commands == ["bash scripts/test.sh", "bash scripts/demo.sh"]
    root = Path(__file__).resolve().parents[1]
    for cmd in commands:
        assert (root / cmd.split()[1]).is_file()
    assert "bash scripts/test.sh" in (root / ".ci" / "run").read_text()
