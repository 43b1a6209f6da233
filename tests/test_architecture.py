"""docs/architecture.md draws the house: every module it names exists under that name, every room's imports are
those its line of the rooms table lists, and the other rules it states hold."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("room", ["client", "live", "recovery", "tools"])
def test_every_module_of_the_kafka_rooms_is_in_a_table(room: str) -> None:
    listed = set(re.findall(rf"`worker/{room}/(\w+\.py)`", DOC))
    present = {path.name for path in (ROOT / "worker" / room).glob("*.py")} - {"__init__.py"}
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


def test_only_the_kafka_rooms_and_the_gateways_reader_use_the_kafka_client() -> None:
    allowed = ("worker/client/", "worker/live/", "worker/recovery/", "worker/tools/", "worker/gateway/reader/",
               "worker/gateway/routing/group.py")
    users = {path for path, names in _modules("worker").items() if any(_of(name, "aiokafka") for name in names)}
    assert users, "no module uses aiokafka: the rule checks nothing"
    strays = sorted(path for path in users if not path.startswith(allowed))
    assert not strays, f"modules that use the Kafka client outside {allowed}: {strays}"


# ---- the rooms' import rules -----------------------------------------------------------------------------------

def _rooms() -> dict[str, tuple[str, ...]]:
    """The rooms table of docs/architecture.md: each room (a package `worker/x/` or a module `worker/x.py`; a cell
    may name several, `worker/_*.py` for the underscored leaves) and the worker's modules it may import."""
    table = DOC[DOC.index("| room | owns | may import |"):].split("\n\n", 1)[0]
    rooms: dict[str, tuple[str, ...]] = {}
    for row in table.splitlines()[2:]:
        room, _, allowed = (cell.strip() for cell in row.strip("|").split(" | "))
        names = tuple(re.findall(r"`(worker[\w.]*)`", allowed))
        for place in re.findall(r"`(worker/[\w/*]+(?:\.py|/))`", room):
            rooms[place] = names
    return rooms


def _room_of(path: str, rooms: dict[str, tuple[str, ...]]) -> str | None:
    if path in rooms:
        return path
    package = "/".join(path.split("/")[:2]) + "/"
    if package in rooms:
        return package
    if re.fullmatch(r"worker/_\w+\.py", path) and "worker/_*.py" in rooms:
        return "worker/_*.py"
    return None


def _itself(place: str) -> str:
    return place.removesuffix("/").removesuffix(".py").replace("/", ".")


def _room_strays(modules: dict[str, set[str]], rooms: dict[str, tuple[str, ...]]) -> list[str]:
    """Imports of the worker's own code that the importing module's room may not make, and modules of no room."""
    found = []
    for path, names in modules.items():
        room = _room_of(path, rooms)
        if room is None:
            found.append(f"{path}: in no room of the table")
            continue
        allowed = (*rooms[room], _itself(room)) if "*" not in room else (_itself(path),)
        found += [f"{path}: {name}" for name in sorted(names)
                  if _of(name, "worker") and name != "worker" and not any(_of(name, ok) for ok in allowed)]
    return found


def test_the_rooms_table_covers_every_room() -> None:
    rooms = _rooms()
    assert {"worker/client/", "worker/live/", "worker/recovery/", "worker/tools/", "worker/gateway/",
            "worker/stream/"} <= set(rooms), sorted(rooms)  # fmt: skip


def test_every_room_imports_only_what_its_line_lists() -> None:
    strays = _room_strays(_modules("worker"), _rooms())
    assert not strays, f"imports the rooms table of docs/architecture.md does not allow: {strays}"


# One planted import per rule of the table that the house most needs: (module, what it imports, the rule).
PLANTED = [
    ("worker/client/_read.py", "worker.settings", "the client kit imports nothing of the worker's but its errors"),
    ("worker/live/task.py", "worker.tools.check", "the live path imports no operator tool"),
    ("worker/live/membership.py", "worker.cli", "the live path imports nothing of the command line"),
    ("worker/recovery/rebuild.py", "worker.live.task", "recovery imports nothing of the live path"),
    ("worker/gateway/reader/tail.py", "worker.recovery", "the gateway imports nothing of the worker's rooms"),
    ("worker/stream/_partition.py", "worker.client", "the core imports no Kafka code"),
    ("worker/stream/_changelog.py", "worker.display.fold", "the stream takes from the display only its projection"),
    ("worker/ops/metrics.py", "worker.stream", "ops imports nothing of the core"),
    ("worker/contract.py", "worker.errors", "a leaf imports nothing"),
]


@pytest.mark.parametrize(("path", "planted", "rule"), PLANTED, ids=[rule for _, _, rule in PLANTED])
def test_an_import_planted_against_a_rule_is_found(path: str, planted: str, rule: str) -> None:
    modules = {path: _imports(ROOT / path) | {planted}}
    assert not _room_strays({path: _imports(ROOT / path)}, _rooms()), "the module breaks the rule already"
    assert _room_strays(modules, _rooms()) == [f"{path}: {planted}"], rule


def _loads(module: str) -> set[str]:
    """The worker's and the Kafka client's modules a fresh interpreter has loaded after importing `module`."""
    code = (f"import sys, {module}; print(' '.join(m for m in sys.modules if m.split('.')[0] in "
            "('worker', 'aiokafka')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT / "tests")
    return set(done.stdout.split())


def test_loading_the_core_loads_no_kafka_client() -> None:
    loaded = _loads("worker.stream")
    assert "worker.stream._partition" in loaded, "the probe saw nothing"
    assert not {m for m in loaded if m.split(".")[0] == "aiokafka" or _of(m, "worker.client")}, sorted(loaded)


def test_loading_the_gateway_loads_nothing_of_the_conversion() -> None:
    loaded = _loads("worker.gateway.server")
    assert "worker.gateway.api" in loaded, "the probe saw nothing"
    conversion = sorted(m for m in loaded if any(_of(m, p) for p in ("worker.stream", "worker.observe", "worker.wire",
                                                                       "worker.live", "worker.recovery")))
    assert not conversion, conversion


def _modules_named(path: Path) -> set[str]:
    """The modules `path` imports from (an `import` statement's names, a `from` statement's module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
    return found


# The rooms whose modules only they import: everyone else takes the room's public surface, its `__init__`.
SURFACES = ("worker.client", "worker.recovery")


def _surface_reaches(modules: dict[str, set[str]]) -> list[str]:
    """Imports of a module inside one of SURFACES from outside that room."""
    return sorted(f"{path}: {name}" for path, names in modules.items() for name in names for room in SURFACES
                  if name.startswith(room + ".") and not path.startswith(room.replace(".", "/") + "/"))


def test_everyone_else_takes_the_kit_and_recovery_by_their_public_surface() -> None:
    modules = {str(p.relative_to(ROOT)): _modules_named(p) for p in sorted((ROOT / "worker").rglob("*.py"))}
    assert not _surface_reaches(modules), _surface_reaches(modules)


def test_a_module_of_the_kit_or_of_recovery_planted_outside_them_is_found() -> None:
    modules = {"worker/gateway/reader/tail.py": {"worker.client._read", "worker.client"},
               "worker/live/task.py": {"worker.recovery.rebuild", "worker.recovery"}}  # fmt: skip
    assert _surface_reaches(modules) == ["worker/gateway/reader/tail.py: worker.client._read",
                                         "worker/live/task.py: worker.recovery.rebuild"]


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
    "process", "process_batch", "checkpoint_parts", "adopt_changelog_keys", "adopt_replay",
    "take_display_tally",
})  # fmt: skip
STATE_READS = frozenset({"replay_from"})
# The modules a partition task runs its state through: the task itself, and the rebuild it awaits, which builds the
# state before the task takes it. The state's own package (its replay shards, the offline conversion) is exempt.
STATE_CHANGERS = frozenset({"worker/live/task.py", "worker/recovery/rebuild.py", "worker/recovery/replay.py"})


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
    sources = _sources("worker/live")
    sources["worker/live/pipeline.py"] += "\n\ndef _planted(state):\n    return state.checkpoint_parts(7)\n"
    (found,) = _state_changes_outside_the_task(sources)
    assert found.startswith("worker/live/pipeline.py:") and found.endswith(" .checkpoint_parts()"), found


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
    sources = {"worker/live/task.py": _sources("worker/live")["worker/live/task.py"]}
    sources["worker/live/task.py"] += "\n\ndef _planted(pipeline):\n    return pipeline._waiting\n"
    assert [hit.split(" ")[1] for hit in _private_reaches(sources)] == ["._waiting"]


# Every lifecycle a table: (module, the attribute holding where an object stands, its first value, the table).
LIFECYCLES = {
    "a partition task's stage": ("worker/live/task.py", "_stage", "REBUILDING", "_MOVES[self]"),
    "a transaction's phase": ("worker/live/transaction.py", "_phase", "IDLE", "_NEXT[self]"),
}


def _moves_outside_the_table(source: str, attribute: str, first: str) -> list[str]:
    """Assignments to `attribute` other than the first one in `__init__` (to `first`) and `_move`'s, which must go
    through the enum's `to` (the table)."""
    found = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AugAssign | ast.AnnAssign) else []  # fmt: skip
            for target in targets:
                if not (isinstance(target, ast.Attribute) and target.attr == attribute):
                    continue
                value = node.value
                through_table = (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                                 and value.func.attr == "to")  # fmt: skip
                if func.name == "_move" and through_table:
                    continue
                if func.name == "__init__" and isinstance(value, ast.Attribute) and value.attr == first:
                    continue
                found.append(f"{func.name}:{node.lineno}")
    return found


@pytest.mark.parametrize("lifecycle", sorted(LIFECYCLES))
def test_every_move_of_a_lifecycle_goes_through_its_table(lifecycle: str) -> None:
    path, attribute, first, table = LIFECYCLES[lifecycle]
    source = (ROOT / path).read_text()
    assert "def _move" in source and table in source, f"{lifecycle}: its table or its one mover is gone"
    assert not _moves_outside_the_table(source, attribute, first), _moves_outside_the_table(source, attribute, first)


@pytest.mark.parametrize(("lifecycle", "planted"), [
    ("a partition task's stage", "def _planted(task):\n    task._stage = Stage.LIVE\n"),
    ("a partition task's stage", "def _take(task):\n    task._stage = Stage.STOPPED  # parked, taken back\n"),
    ("a transaction's phase", "def _planted(txn):\n    txn._phase = TxnPhase.BROKEN\n"),
])  # fmt: skip
def test_a_move_planted_beside_the_table_is_found(lifecycle: str, planted: str) -> None:
    path, attribute, first, _ = LIFECYCLES[lifecycle]
    source = (ROOT / path).read_text() + "\n\n" + planted
    assert [hit.split(":")[0] for hit in _moves_outside_the_table(source, attribute, first)] == [
        planted.split("(", maxsplit=1)[0].removeprefix("def ")]
