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
    names = {name for name in re.findall(r"\b([a-z_]+\.py)\b", DOC) if not name.startswith("test_")}
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


def test_only_the_kafka_packages_and_the_gateways_reader_use_the_kafka_client() -> None:
    allowed = ("worker/client/", "worker/kafka/", "worker/gateway/reader/", "worker/gateway/routing/group.py")
    users = {path for path, names in _modules("worker").items() if any(_of(name, "aiokafka") for name in names)}
    assert users, "no module uses aiokafka: the rule checks nothing"
    strays = sorted(path for path in users if not path.startswith(allowed))
    assert not strays, f"modules that use the Kafka client outside {allowed}: {strays}"


# ---- the rooms' import rules -----------------------------------------------------------------------------------

# What the client kit may import of the worker: its one error tree, a leaf that imports nothing.
KIT_MAY_IMPORT = ("worker.client", "worker.errors")


def _kit_strays(modules: dict[str, set[str]]) -> list[str]:
    """Imports of the worker's own code in the client kit, but the kit itself and the error tree."""
    return sorted(f"{path}: {name}" for path, names in modules.items() if path.startswith("worker/client/")
                  for name in names if _of(name, "worker") and not any(_of(name, ok) for ok in KIT_MAY_IMPORT))


def _kit_private_reaches(modules: dict[str, set[str]]) -> list[str]:
    """Imports of a private module of the kit from outside it: everyone else takes the kit's public surface."""
    return sorted(f"{path}: {name}" for path, names in modules.items() if not path.startswith("worker/client/")
                  for name in names if re.match(r"worker\.client\._", name))


def test_the_client_kit_imports_nothing_of_the_worker_but_its_errors() -> None:
    modules = _modules("worker/client")
    assert len(modules) >= 10, "the kit is gone: the rule checks nothing"
    assert not _kit_strays(modules), _kit_strays(modules)


def test_a_worker_import_planted_in_the_client_kit_is_found() -> None:
    modules = _modules("worker/client")
    modules["worker/client/_read.py"] = modules["worker/client/_read.py"] | {"worker.settings", "worker.errors"}
    assert _kit_strays(modules) == ["worker/client/_read.py: worker.settings"]


def test_everyone_else_takes_the_client_kits_public_surface() -> None:
    assert not _kit_private_reaches(_modules("worker")), _kit_private_reaches(_modules("worker"))


def test_a_private_kit_module_planted_in_the_gateway_is_found() -> None:
    modules = _modules("worker/gateway")
    modules["worker/gateway/reader/tail.py"] |= {"worker.client._read", "worker.client._read.end_offsets"}
    assert [hit.split(": ")[1] for hit in _kit_private_reaches(modules)] == [
        "worker.client._read", "worker.client._read.end_offsets"]


def test_the_core_imports_no_kafka_and_no_gateway_code() -> None:
    banned = ("aiokafka", "worker.client", "worker.kafka", "worker.gateway", "worker.app")
    for package in ("worker/wire", "worker/observe", "worker/display", "worker/stream"):
        for path, names in _modules(package).items():
            bad = sorted(name for name in names if any(_of(name, ban) for ban in banned))
            assert not bad, f"{path} imports {bad}: the core is used and tested without Kafka"


def test_the_stream_package_takes_from_the_display_only_its_projection() -> None:
    for path, names in _modules("worker/stream").items():
        display = (name for name in names if _of(name, "worker.display"))
        bad = sorted(name for name in display if not _of(name, "worker.display.projection"))
        assert not bad, f"{path} imports {bad}: the partition state reaches the display through its projection"


# ---- the gateway's peers -------------------------------------------------------------------------------------------

ROUTING = "worker/gateway/routing/"
# Who else may open an HTTP client: the keys, for the identity provider's JWKS.
HTTP_CLIENT_USERS = (ROUTING, "worker/gateway/keys.py")
_PEER_NAMES = frozenset({"PEER_HEADER", "THREAD_HEADER"})
_HTTP_CLIENT = frozenset({"ClientSession", "TCPConnector", "request"})


def _peer_talk(sources: dict[str, str]) -> list[str]:
    """Outside the routing package: a peer header named (its constant, or its text `X-Harness-Gateway-...`), an
    HTTP client used (aiohttp's ClientSession, TCPConnector or request; keys.py aside), or a routing module reached
    past the package's surface (`worker.gateway.routing`: the router, the map, the peer key and the errors)."""
    found = []
    for path, source in sources.items():
        if path.startswith(ROUTING):
            continue
        for node in ast.walk(ast.parse(source, path)):
            hit = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower().startswith(
                    "x-harness-gateway-"):  # fmt: skip
                hit = repr(node.value)
            elif isinstance(node, ast.Name) and node.id in _PEER_NAMES:
                hit = node.id
            elif isinstance(node, ast.Attribute) and node.attr in _PEER_NAMES:
                hit = node.attr
            elif (isinstance(node, ast.Attribute) and node.attr in _HTTP_CLIENT and isinstance(node.value, ast.Name)
                  and node.value.id == "aiohttp" and not path.startswith(HTTP_CLIENT_USERS)):  # fmt: skip
                hit = f"aiohttp.{node.attr}"
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                if node.module.startswith("worker.gateway.routing."):
                    hit = node.module
                elif node.module.startswith("aiohttp") and not path.startswith(HTTP_CLIENT_USERS):
                    hit = next((f"{node.module}.{a.name}" for a in node.names if a.name in _HTTP_CLIENT), None)
            if hit is not None:
                found.append(f"{path}:{node.lineno} {hit}")
    return found


def test_only_the_routing_talks_to_peers() -> None:
    sources = _sources()
    assert _peer_talk({path.replace(ROUTING, "worker/gateway/elsewhere/"): source
                       for path, source in sources.items() if path.startswith(ROUTING)}), "the rule checks nothing"
    assert not _peer_talk(sources), _peer_talk(sources)


def test_peer_talk_planted_in_the_api_is_found() -> None:
    api = _sources("worker/gateway")["worker/gateway/api.py"]
    planted = {
        "worker/gateway/api.py": api + (
            "\n\ndef _planted(request):\n    return request.headers.get('X-Harness-Gateway-Peer')\n"
            "\n\nasync def _planted_hop(url):\n    async with aiohttp.ClientSession() as session:\n"
            "        return await session.get(url)\n"),
        "worker/gateway/streams.py": "from worker.gateway.routing.relay import Relays\n",
    }
    assert [hit.split(" ")[1] for hit in _peer_talk(planted)] == [
        "'X-Harness-Gateway-Peer'", "aiohttp.ClientSession", "worker.gateway.routing.relay"]


# ---- who changes what ----------------------------------------------------------------------------------------------

# A PartitionState's methods that change it; every other public method only reads (a test below keeps the two lists
# covering the class, so a new method is placed on purpose).
STATE_CHANGES = frozenset({
    "process", "process_batch", "checkpoint", "checkpoint_parts", "adopt_changelog_keys", "adopt_replay",
    "take_display_tally",
})  # fmt: skip
STATE_READS = frozenset({"replay_from"})
# The modules a partition task runs its state through: the task itself, and the rebuild it awaits, which builds the
# state before the task takes it. The state's own package (its replay shards, the offline conversion) is exempt.
STATE_CHANGERS = frozenset({"worker/kafka/task.py", "worker/kafka/rebuild.py", "worker/kafka/replay.py"})


def _sources(under: str = "worker") -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in sorted((ROOT / under).rglob("*.py"))}


def _state_changes_outside_the_task(sources: dict[str, str]) -> list[str]:
    """Calls of a method that changes a PartitionState, outside the state's package and the partition task."""
    found = []
    for path, source in sources.items():
        if path.startswith("worker/stream/") or path in STATE_CHANGERS:
            continue
        for node in ast.walk(ast.parse(source, path)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in STATE_CHANGES):  # fmt: skip
                found.append(f"{path}:{node.lineno} .{node.func.attr}()")
    return found


def test_the_state_change_lists_cover_the_partition_state() -> None:
    tree = ast.parse((ROOT / "worker" / "stream" / "_partition.py").read_text())
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "PartitionState"]
    public = {
        node.name for node in cls.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
        and not any(isinstance(d, ast.Name) and d.id in {"property", "classmethod"} for d in node.decorator_list)
    }  # fmt: skip
    assert public == STATE_CHANGES | STATE_READS, f"place {sorted(public ^ (STATE_CHANGES | STATE_READS))}"


def test_only_the_partition_task_changes_a_partition_state() -> None:
    found = _state_changes_outside_the_task(_sources())
    assert not found, f"a PartitionState changed outside the partition task: {found}"


def test_a_state_change_planted_in_the_commit_pipeline_is_found() -> None:
    sources = _sources("worker/kafka")
    sources["worker/kafka/pipeline.py"] += "\n\ndef _planted(state):\n    return state.checkpoint(7)\n"
    (found,) = _state_changes_outside_the_task(sources)
    assert found.startswith("worker/kafka/pipeline.py:") and found.endswith(" .checkpoint()"), found


# Modules whose reason to exist is reaching into another library's private attributes, each saying which.
PRIVATE_ACCESS_ALLOWED = frozenset({"worker/client/_aiokafka.py"})


def _private_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, assigned attributes and slots."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_"):
            names.add(node.value)  # a slot
    return {name for name in names if name.startswith("_")}


# A named tuple's public methods and fields carry an underscore so they never clash with its fields.
_NAMED_TUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _private_reaches(sources: dict[str, str]) -> list[str]:
    """`x._name` on an object other than `self` or `cls` (a class and its subclasses share theirs), where `_name`
    is not one of the module's own (dunder names and a named tuple's API aside)."""
    found = []
    for path, source in sources.items():
        if path in PRIVATE_ACCESS_ALLOWED:
            continue
        tree = ast.parse(source, path)
        own = _private_names(tree) | _NAMED_TUPLE_API
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and node.attr not in own
                    and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})):  # fmt: skip
                found.append(f"{path}:{node.lineno} .{node.attr}")
    return found


def test_nothing_reaches_into_another_modules_private_attributes() -> None:
    found = _private_reaches(_sources())
    assert not found, f"private attributes of another module used: {found}"


def test_a_private_attribute_planted_across_modules_is_found() -> None:
    sources = {"worker/kafka/task.py": _sources("worker/kafka")["worker/kafka/task.py"]}
    sources["worker/kafka/task.py"] += "\n\ndef _planted(pipeline):\n    return pipeline._waiting\n"
    assert [hit.split(" ")[1] for hit in _private_reaches(sources)] == ["._waiting"]


def _stage_moves_outside_the_table(source: str) -> list[str]:
    """Assignments to a task's `_stage` other than the first one in `__init__` and `_move`'s, which must go through
    `Stage.to` (the table)."""
    found = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AugAssign | ast.AnnAssign) else []  # fmt: skip
            for target in targets:
                if not (isinstance(target, ast.Attribute) and target.attr == "_stage"):
                    continue
                value = node.value
                through_table = (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                                 and value.func.attr == "to")  # fmt: skip
                if func.name == "_move" and through_table:
                    continue
                if func.name == "__init__" and isinstance(value, ast.Attribute) and value.attr == "REBUILDING":
                    continue
                found.append(f"{func.name}:{node.lineno}")
    return found


def test_every_task_stage_change_goes_through_the_table() -> None:
    source = (ROOT / "worker" / "kafka" / "task.py").read_text()
    assert "def _move" in source and "_MOVES[self]" in source, "the task's stage table or its one mover is gone"
    assert not _stage_moves_outside_the_table(source), _stage_moves_outside_the_table(source)


def test_a_stage_change_planted_beside_the_table_is_found() -> None:
    source = (ROOT / "worker" / "kafka" / "task.py").read_text()
    planted = source + "\n\ndef _planted(task):\n    task._stage = Stage.LIVE\n"
    assert [hit.split(":")[0] for hit in _stage_moves_outside_the_table(planted)] == ["_planted"]
