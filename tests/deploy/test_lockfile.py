"""The lock files the image installs from: pinned, hashed, in step with pyproject.toml, and closed under what
their packages require (checked against the installed metadata, without the network); and pyproject.toml's
version, the one every other place tells."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from devtools.lockfile import BUILD_LOCK, BUILD_ROOTS, RUNTIME_LOCK, applies, parse_lock, runtime_roots
from tests.deploy.conftest import ROOT
from tests.deploy.test_dockerfile import instructions

LOCKS = {"runtime": (RUNTIME_LOCK, runtime_roots), "build": (BUILD_LOCK, lambda: [Requirement(r) for r in BUILD_ROOTS])}


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_root_is_pinned_within_its_specifier_and_hashed(lock: str) -> None:
    path, roots = LOCKS[lock]
    pins = parse_lock(path.read_text())
    assert pins, f"{path.name} is empty"
    for name, (version, hashes) in pins.items():
        assert re.fullmatch(r"[0-9][0-9a-z.+!-]*", version), f"{name} is not pinned with == ({version!r})"
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), f"{name} has no sha256 hash"
    for root in roots():
        name = canonicalize_name(root.name)
        assert name in pins, f"{root} of pyproject.toml is not in {path.name}: run `python -m devtools.lockfile`"
        assert root.specifier.contains(pins[name][0], prereleases=True), (
            f"{path.name} pins {name}=={pins[name][0]}, outside pyproject.toml's {root}")


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_lock_is_closed_and_holds_nothing_else(lock: str) -> None:
    """Where this environment has the locked version installed, its requirements must be locked too, at
    versions they accept; and every locked package must be needed by a root."""
    path, roots = LOCKS[lock]
    pins = parse_lock(path.read_text())
    needed: set[str] = set()
    todo = [canonicalize_name(r.name) for r in roots() if applies(r)]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        version = pins[name][0]
        if _installed(name) != version:
            continue  # this environment has another version: its metadata says nothing about the locked one
        for requirement in map(Requirement, metadata.requires(name) or []):
            if not applies(requirement):
                continue
            dep = canonicalize_name(requirement.name)
            assert dep in pins, f"{name}=={version} requires {requirement}, missing from {path.name}"
            assert requirement.specifier.contains(pins[dep][0], prereleases=True), (
                f"{name}=={version} requires {requirement}; {path.name} pins {pins[dep][0]}")
            todo.append(dep)
    assert set(pins) <= needed, f"{path.name} pins what nothing requires: {sorted(set(pins) - needed)}"


def test_the_runtime_lock_is_what_this_environment_tests() -> None:
    """scripts/test.sh installs requirements.lock first, so the suite runs on the versions the image ships."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert "--require-hashes" in script and "requirements.lock" in script
    pins = parse_lock(RUNTIME_LOCK.read_text())
    different = {n: (v, _installed(n)) for n, (v, _) in pins.items() if _installed(n) != v}
    # A test extra may need a newer release of a shared package; none of the worker's own roots may differ.
    roots = {canonicalize_name(r.name) for r in runtime_roots()}
    assert not (set(different) & roots), f"installed versions differ from the lock: {different}"


def test_the_image_installs_only_from_the_locks() -> None:
    runs = " ".join(args for word, args in instructions() if word == "RUN")
    installs = re.findall(r"pip install [^&]*", runs)
    for command in installs:
        if "-r requirements" in command:
            assert "--require-hashes" in command and "--no-deps" in command and "--only-binary=:all:" in command
        else:
            assert "--no-deps" in command and "/wheels/" in command, command
    assert "-r requirements.lock" in runs and "-r requirements-build.lock" in runs
    assert "pip check" in runs


def test_oci_labels_name_the_version_and_source() -> None:
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"',
                             " ".join(a for w, a in instructions() if w == "LABEL")))
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    chart = yaml.safe_load((ROOT / "helm" / "harness-agui-worker" / "Chart.yaml").read_text())
    assert labels["org.opencontainers.image.source"] in chart["sources"]
    assert {"title", "description", "licenses", "url", "documentation"} <= {k.rsplit(".", 1)[1] for k in labels}


def test_one_version_is_told_everywhere() -> None:
    """pyproject.toml's version is the one source: CHANGELOG's newest release, the chart's version and appVersion,
    the image's VERSION default, the image tags the READMEs build and install, and what `--version` prints."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "helm" / "harness-agui-worker" / "Chart.yaml").read_text())
    [version_arg] = [a for w, a in instructions() if w == "ARG" and a.startswith("VERSION=")]
    changelog = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    readme_tags = re.findall(r"harness-agui-worker:([0-9][^ ]*) ", (ROOT / "README.md").read_text())
    chart_tags = re.findall(r"image\.tag=(\S+)", (ROOT / "helm" / "harness-agui-worker" / "README.md").read_text())
    script = Path(sys.executable).parent / "harness-agui-worker"
    printed = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=True, timeout=60)
    told = {
        "CHANGELOG.md's newest release": changelog[0],
        "Chart.yaml version": str(chart["version"]),
        "Chart.yaml appVersion": str(chart["appVersion"]),
        "Dockerfile ARG": version_arg.removeprefix("VERSION="),
        "README.md's image tags": " ".join(sorted(set(readme_tags))),
        "the chart README's image.tag": " ".join(sorted(set(chart_tags))),
        "harness-agui-worker --version": printed.stdout.strip().removeprefix("harness-agui-worker "),
    }
    assert {where: said for where, said in told.items() if said != version} == {}, f"pyproject.toml says {version}"
