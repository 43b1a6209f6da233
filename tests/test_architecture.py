"""docs/architecture.md draws the live path: every module it names exists under that name."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()


def test_every_path_named_exists() -> None:
    paths = set(re.findall(r"\bworker/[\w/]+\.py\b", DOC))
    assert len(paths) >= 15, paths
    missing = sorted(path for path in paths if not (ROOT / path).is_file())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_module_in_the_picture_is_one_of_the_worker() -> None:
    names = set(re.findall(r"\b([a-z_]+\.py)\b", DOC)) - {"test_architecture.py"}
    modules = {path.name for path in (ROOT / "worker").rglob("*.py")}
    unknown = sorted(names - modules)
    assert not unknown, f"docs/architecture.md names modules the worker does not have: {unknown}"


def test_every_module_of_the_kafka_package_is_in_the_table() -> None:
    listed = set(re.findall(r"`worker/kafka/(\w+\.py)`", DOC))
    present = {path.name for path in (ROOT / "worker" / "kafka").glob("*.py")} - {"__init__.py"}
    assert present == listed, f"not in the table: {sorted(present - listed)}; gone: {sorted(listed - present)}"
