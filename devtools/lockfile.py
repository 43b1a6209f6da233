"""The image's pinned dependencies: `requirements.lock` (runtime) and `requirements-build.lock` (the builder's
Python tools for the native module), each the closure of its roots at the versions installed in this environment,
with hashes.

    python -m devtools.lockfile    # rewrite both from the current .venv; downloads the wheels once to hash them

The roots of the runtime lock are `[project].dependencies` of pyproject.toml; those of the build lock are
`BUILD_ROOTS`. Each pinned version is hashed for every interpreter of `LOCKED_PYTHONS` (CPython 3.11, the
image's, 3.12 and 3.13) on glibc Linux x86_64 and aarch64, so `pip install --require-hashes` accepts exactly the
wheels pip picks there and nothing else; the closure is taken under each of those interpreters' markers.
`tests/deploy/test_lockfile.py` checks, without the network, that the locks match pyproject.toml and are closed
under the installed packages' requirements.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

__all__ = ["BUILD_LOCK", "BUILD_ROOTS", "LOCKED_PYTHONS", "MARKER_ENV", "RUNTIME_LOCK", "applies", "closure", "main",
           "parse_lock", "runtime_roots"]

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_LOCK = ROOT / "requirements.lock"
BUILD_LOCK = ROOT / "requirements-build.lock"
BUILD_ROOTS = ("setuptools", "setuptools-rust", "wheel")
MARKER_ENV = {"python_version": "3.11", "python_full_version": "3.11.14", "sys_platform": "linux",
              "platform_system": "Linux", "os_name": "posix", "platform_python_implementation": "CPython",
              "implementation_name": "cpython", "extra": ""}
"""The image's interpreter, for evaluating requirement markers."""
LOCKED_PYTHONS = ("3.11", "3.12", "3.13")
"""The CPython releases the locks hold wheels for (on glibc Linux, x86_64 and aarch64); the first is the image's."""
_ARCHITECTURES = ("x86_64", "aarch64")


def _target(python: str, architecture: str) -> list[str]:
    """`pip download` flags choosing the wheel pip installs for CPython `python` on glibc Linux (2.36, the image's
    Debian bookworm, and older) on `architecture`."""
    platforms = [f"manylinux_2_{minor}_{architecture}" for minor in range(36, 4, -1)]
    platforms += [f"manylinux{alias}_{architecture}" for alias in ("2014", "2010", "1")]
    abi = "cp" + python.replace(".", "")
    return [*(flag for platform in platforms for flag in ("--platform", platform)), "--python-version", python,
            "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none"]


_TARGETS = [_target(python, architecture) for python in LOCKED_PYTHONS for architecture in _ARCHITECTURES]
_MARKER_ENVS = [MARKER_ENV, *({**MARKER_ENV, "python_version": python, "python_full_version": f"{python}.0"}
                              for python in LOCKED_PYTHONS[1:])]


def runtime_roots() -> list[Requirement]:
    """`[project].dependencies` of pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def applies(requirement: Requirement) -> bool:
    """Whether a requirement (no extras asked for) applies to the image's interpreter or another locked one."""
    return requirement.marker is None or any(Marker(str(requirement.marker)).evaluate(env) for env in _MARKER_ENVS)


def closure(roots: Iterable[Requirement]) -> dict[str, str]:
    """Canonical name -> installed version of the roots and everything they require, recursively."""
    pins: dict[str, str] = {}
    todo = [r for r in roots if applies(r)]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in pins:
            continue
        pins[name] = metadata.version(name)
        todo.extend(r for r in map(Requirement, metadata.requires(name) or []) if applies(r))
    return dict(sorted(pins.items()))


def parse_lock(text: str) -> dict[str, tuple[str, list[str]]]:
    """Canonical name -> (pinned version, sha256 hashes) of a lock file's entries."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for logical in text.replace("\\\n", " ").splitlines():
        words = logical.split("#", 1)[0].split()
        if not words:
            continue
        name, _, version = words[0].partition("==")
        hashes = [w.removeprefix("--hash=sha256:") for w in words[1:] if w.startswith("--hash=sha256:")]
        entries[canonicalize_name(name)] = (version, hashes)
    return entries


def _hashes(name: str, version: str, workdir: Path) -> list[str]:
    found: set[str] = set()
    for i, platform in enumerate(_TARGETS):
        dest = workdir / f"{name}-{i}"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--dest", str(dest),
             *platform, f"{name}=={version}"],
            check=True,
        )
        found.update(hashlib.sha256(path.read_bytes()).hexdigest() for path in dest.iterdir())
    return sorted(found)


def _write(path: Path, pins: dict[str, str], header: str, workdir: Path) -> None:
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for name, version in pins.items():
        hashes = _hashes(name, version, workdir)
        lines.append(" \\\n    ".join([f"{name}=={version}", *(f"--hash=sha256:{h}" for h in hashes)]))
    path.write_text("\n".join(lines) + "\n")
    print(f"lockfile: wrote {path.relative_to(ROOT)} ({len(pins)} packages)")


def main() -> int:
    """Rewrite both lock files from the versions installed here."""
    with tempfile.TemporaryDirectory() as tmp:
        _write(RUNTIME_LOCK, closure(runtime_roots()),
               "The worker's runtime dependencies, as the image installs them (pip install --require-hashes).\n"
               "Generated by `python -m devtools.lockfile` from pyproject.toml; do not edit.", Path(tmp))
        _write(BUILD_LOCK, closure(Requirement(r) for r in BUILD_ROOTS),
               "The image builder's Python tools: setuptools, setuptools-rust and wheel, with what they need.\n"
               "Generated by `python -m devtools.lockfile`; do not edit.", Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
