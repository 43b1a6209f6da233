"""The README and docs/ document what the code has: every setting and metric, commands that exist, links that
resolve, every section the code cites, and no run diary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from worker.cli import command_parser, is_secret
from worker.gateway.metrics import GatewayMetrics
from worker.ops import Metrics
from worker.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
METRICS = (ROOT / "docs" / "metrics.md").read_text()
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md",
             ROOT / "helm" / "harness-agui-worker" / "README.md"]


def _section(title: str, text: str = README) -> str:
    """The section under the heading `title` (any level), up to the next heading of the same or a higher level;
    `#` lines inside fenced code are not headings."""
    lines = text.splitlines(keepends=True)
    fenced = False
    start = level = None
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"(#+) (.*)\n?$", line)
        if heading is None:
            continue
        depth = len(heading.group(1))
        if start is None and heading.group(2) == title:
            start, level = i, depth
        elif start is not None and level is not None and depth <= level:
            return "".join(lines[start:i])
    assert start is not None, f"no section {title!r}"
    return "".join(lines[start:])


def readme_metric_names() -> list[str]:
    """Every metric docs/metrics.md documents (the README links there)."""
    return re.findall(r"^\| `(harness_agui_[a-z_]+)` \|", METRICS, flags=re.M)


def python_blocks(title: str) -> list[str]:
    """The ```python blocks of a README section, as users copy them."""
    return re.findall(r"```python\n(.*?)```", _section(title), flags=re.S)


def test_configuration_table_lists_every_setting_with_flag_and_env() -> None:
    for name, info in Settings.model_fields.items():
        flag = "— \\(a secret\\)" if is_secret(info) else f"`--{name.replace('_', '-')}`"
        env = f"WORKER_{name.upper()}"
        assert re.search(rf"^\| {flag} \| `{env}` \|", CONFIGURATION, flags=re.M), f"{name} is not documented"
    assert "docs/configuration.md" in _section("Configuration")


def test_metrics_table_matches_the_registry() -> None:
    documented = set(readme_metric_names())
    exposition = Metrics().render().decode()
    exposed = set(re.findall(r"^# TYPE (harness_agui_[a-z_]+) ", exposition, flags=re.M))
    # prometheus-client names a counter family without its `_total` suffix.
    exposed = {n if n in documented else f"{n}_total" for n in exposed}
    assert documented == exposed


def test_gateway_metrics_table_matches_its_registry() -> None:
    """docs/gateway.md's table names every gateway metric (a row may list several as `_<rest of the name>`), and
    nothing the gateway does not export."""
    table = _section("Metrics", (ROOT / "docs" / "gateway.md").read_text())
    exposition = GatewayMetrics().render().decode()
    exposed = {name for name in re.findall(r"^# TYPE (harness_agui_gateway_[a-z_]+) ", exposition, flags=re.M)
               if not name.endswith("_created")}  # fmt: skip
    for name in exposed:
        assert f"`{name}" in table or f"`_{name.removeprefix('harness_agui_gateway_')}`" in table, name
    named = set(re.findall(r"`(harness_agui_gateway_[a-z_]+)", table))
    assert named <= exposed


def test_quick_start_is_two_commands_that_exist() -> None:
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", README, flags=re.S)
    assert block is not None
    commands = [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"], "the demo comes first, the tests second"
    for cmd in commands:
        assert (ROOT / cmd.split()[1]).is_file()
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_setup_needs_no_root_and_the_quick_start_names_its_tools() -> None:
    scripts = {path.name: path.read_text() for path in (ROOT / "scripts").glob("*.sh")}
    assert {"test.sh", "install-tools.sh", "demo.sh"} <= set(scripts)
    for name, text in scripts.items():
        found = re.findall(r"\b(sudo|apt-get|apt|yum|dnf|apk|id -u)\b", text)
        assert not found, f"scripts/{name} uses {found}: no set-up step may need root"
    tools = " ".join(re.findall(r"^\| ([^|]+) \|", _section("Quick start"), flags=re.M))
    for tool in ("CPython", "Rust", "cargo", "C linker", "Java", "Maven", "Go", "Node.js", "npm"):
        assert tool in tools, f"the Quick start's table of tools does not name {tool}"


def test_the_docs_index_links_every_page_in_the_operators_order() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    pages = {path.name for path in (ROOT / "docs").glob("*.md")} - {"README.md"}
    linked = set(re.findall(r"\]\(([a-z-]+\.md)(?:#[^)]*)?\)", index))
    assert pages <= linked, f"docs/README.md does not link {sorted(pages - linked)}"
    steps = re.findall(r"^\| [0-9]+\. ([A-Z][a-z]+) \|", index, flags=re.M)
    assert steps == ["Install", "Secure", "Check", "Run", "Deploy", "Gateway", "Replay", "Upgrade", "Inspect",
                     "Troubleshoot"]


def test_every_command_has_its_exit_statuses() -> None:
    usage = command_parser().format_usage()
    commands = re.search(r"\{([a-z,]+)\}", usage)
    assert commands is not None, usage
    rows = " ".join(re.findall(r"^\| (`[^|]+) \|", (ROOT / "docs" / "exit-codes.md").read_text(), flags=re.M))
    for command in [*commands.group(1).split(","), "gateway token", "gateway check"]:
        assert f"`python -m worker {command}`" in rows or f"`{command}`" in rows, f"{command} has no exit statuses"


def test_the_produce_and_consume_examples_compile() -> None:
    """tests/kafka/test_readme_examples.py runs them on a broker; this catches a broken block without one."""
    for title in ("Producing from a Harness host", "Consuming AG-UI events"):
        [block] = python_blocks(title)
        compile(block, title, "exec")


def test_the_offset_reset_uses_the_standard_kafka_tool() -> None:
    """The image carries no devtools: the documented procedure names the Kafka distribution's script."""
    operations = _section("Operations")
    reset = "kafka-consumer-groups.sh --bootstrap-server $BS --group $GROUP --topic $SOURCE --reset-offsets"
    assert reset in operations
    assert "python -m devtools" not in operations.replace("`python -m devtools.kafka_tools consumer-groups`", "")


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_run_diary(path: Path) -> None:
    diary = re.compile(r"\b(today|yesterday|the day before|this morning|of the day|[0-9]+ of [0-9]+ runs)\b", re.I)
    hits = [line for line in path.read_text().splitlines() if diary.search(line)]
    assert not hits, hits


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower-cased, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        assert dest.exists(), f"{path.name}: link to missing {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest.read_text()), f"{path.name}: no heading for #{anchor} in {dest.name}"


def _cited(pattern: str) -> set[str]:
    found: set[str] = set()
    for source in (ROOT / "worker").rglob("*.py"):
        for match in re.finditer(pattern, source.read_text()):
            found.update(re.findall(r"§([0-9](?:[0-9a-z.]*[0-9a-z])?)", match.group(0)))
    return found


@pytest.mark.parametrize(
    ("doc", "pattern"),
    [
        ("conversion-spec.md", r"spec (?:§[0-9a-z.]+(?:, )?)+"),
        ("host-contract.md", r"host contract (?:§[0-9a-z.]+(?:, )?)+"),
    ],
)
def test_every_section_the_code_cites_exists(doc: str, pattern: str) -> None:
    cited = _cited(pattern)
    assert cited, f"nothing in worker/ cites {doc}"
    text = re.sub(r"```.*?```", "", (ROOT / "docs" / doc).read_text(), flags=re.S)
    numbered = set(re.findall(r"^#+ ([0-9](?:[0-9a-z.]*[0-9a-z])?)\.? ", text, flags=re.M))
    assert cited <= numbered, f"{doc} lacks the cited sections {sorted(cited - numbered)}"
