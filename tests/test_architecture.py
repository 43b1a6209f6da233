"""docs/architecture.md draws the live path: every module it names exists under that name, and the import rules it
states hold."""

from __future__ import annotations

import ast
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


def _imports(path: Path) -> set[str]:
    """Every module `path` imports (absolute names; the package uses no relative imports)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import"
            assert node.module is not None
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _modules(under: str) -> dict[str, set[str]]:
    return {str(path.relative_to(ROOT)): _imports(path) for path in sorted((ROOT / under).rglob("*.py"))}


def _of(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_only_the_kafka_package_and_the_gateways_reader_use_the_kafka_client() -> None:
    allowed = ("worker/kafka/", "worker/gateway/reader/")
    users = {path for path, names in _modules("worker").items() if any(_of(name, "aiokafka") for name in names)}
    assert users, "no module uses aiokafka: the rule checks nothing"
    strays = sorted(path for path in users if not path.startswith(allowed))
    assert not strays, f"modules that use the Kafka client outside worker/kafka/ and the gateway's reader: {strays}"


def test_the_core_imports_no_kafka_and_no_gateway_code() -> None:
    banned = ("aiokafka", "worker.kafka", "worker.gateway", "worker.app")
    for package in ("worker/wire", "worker/observe", "worker/display", "worker/stream"):
        for path, names in _modules(package).items():
            bad = sorted(name for name in names if any(_of(name, ban) for ban in banned))
            assert not bad, f"{path} imports {bad}: the core is used and tested without Kafka"


def test_the_stream_package_takes_from_the_display_only_its_projection() -> None:
    for path, names in _modules("worker/stream").items():
        display = (name for name in names if _of(name, "worker.display"))
        bad = sorted(name for name in display if not _of(name, "worker.display.projection"))
        assert not bad, f"{path} imports {bad}: the partition state reaches the display through its projection"
