"""The parts generated from Settings and GatewaySettings (docs/configuration.md's tables, the chart's table, the values
schema's `config`) are up to date, and the check notices a setting it has not seen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field

from devtools import gen_docs
from worker.gateway.settings import GatewaySettings
from worker.settings import Settings


def test_generated_parts_are_current() -> None:
    assert gen_docs.check() == [], "run `python -m devtools.gen_docs` after changing worker/settings.py"


def test_a_new_setting_makes_every_target_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    class WithNewSetting(Settings):
        checkpoint_everything_ms: int = Field(250, ge=10, description="A setting the docs do not know yet.")

    monkeypatch.setattr(gen_docs, "Settings", WithNewSetting)
    assert sorted(gen_docs.check()) == sorted(
        str(p.relative_to(gen_docs.ROOT)) for p in (gen_docs.CONFIGURATION, gen_docs.CHART_README, gen_docs.SCHEMA)
    )
    prop = gen_docs.schema_config_properties()["checkpoint_everything_ms"]
    assert prop == {"type": ["integer", "null"], "minimum": 10, "default": 250,
                    "description": "A setting the docs do not know yet."}


def test_a_new_gateway_setting_makes_the_configuration_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    class WithNewSetting(GatewaySettings):
        replay_window_ms: int = Field(250, ge=10, description="A gateway setting not yet documented.")

    monkeypatch.setattr(gen_docs, "GatewaySettings", WithNewSetting)
    assert gen_docs.check() == [str(gen_docs.CONFIGURATION.relative_to(gen_docs.ROOT))]
    table = gen_docs.settings_table(WithNewSetting, (Settings, "run"))
    new_row = "| `--replay-window-ms` | `WORKER_REPLAY_WINDOW_MS` | `250` | A gateway setting not yet documented. |"
    assert new_row in table
    assert "| `--output-topic` | `WORKER_OUTPUT_TOPIC` (also `run`) |" in table


def test_schema_defaults_and_descriptions_are_the_settings() -> None:
    config = json.loads(gen_docs.SCHEMA.read_text())["properties"]["config"]["properties"]
    for name, prop in config.items():
        info = Settings.model_fields[name]
        default = info.default.value if hasattr(info.default, "value") else info.default
        assert (prop["default"], prop["description"]) == (default, info.description), name


def test_every_region_has_its_markers(tmp_path: Path) -> None:
    broken = tmp_path / "configuration.md"
    broken.write_text("no markers here\n")
    with pytest.raises(SystemExit, match="lacks the markers of region 'settings'"):
        gen_docs._replace_region(broken.read_text(), "settings", "x", gen_docs.CONFIGURATION)
