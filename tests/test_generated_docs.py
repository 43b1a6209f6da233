"""The parts generated from Settings (docs/configuration.md and chart tables, the values schema's `config`) are up
to date, and the check notices a setting it has not seen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field

from devtools import gen_docs
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
