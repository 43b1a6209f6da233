"""The image's pinned dependencies: `requirements.lock` (runtime) and `requirements-build.lock` (the builder's
mypyc tool chain), each the closure of its roots at the versions installed in this environment, with hashes.

    python -m devtools.lockfile    # rewrite both from the current .venv; downloads the wheels once to hash them

The roots of the runtime lock are `[project].dependencies` of pyproject.toml; those of the build lock are
`BUILD_ROOTS`. Each pinned wheel is hashed for the image's platforms (CPython 3.11, glibc x86_64 and aarch64),
so `pip install --require-hashes` accepts exactly these files. `tests/deploy/test_lockfile.py` checks, without
the network, that the locks match pyproject.toml and are closed under the installed packages' requirements.
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

__all__ = ["BUILD_LOCK", "BUILD_ROOTS", "MARKER_ENV", "RUNTIME_LOCK", "closure", "main", "parse_lock", "runtime_roots"]

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_LOCK = ROOT / "requirements.lock"
BUILD_LOCK = ROOT / "requirements-build.lock"
BUILD_ROOTS = ("mypy", "setuptools", "wheel")
MARKER_ENV = {"python_version": "3.11", "python_full_version": "3.11.14", "sys_platform": "linux",
              "platform_system": "Linux", "os_name": "posix", "platform_python_implementation": "CPython",
              "implementation_name": "cpython", "extra": ""}
"""The image's interpreter, for evaluating requirement markers."""
_PLATFORMS = (
    [],  # this machine: Debian bookworm x86_64, the image's own base
    [*(flag for minor in range(36, 16, -1) for flag in ("--platform", f"manylinux_2_{minor}_aarch64")),
     "--platform", "manylinux2014_aarch64", "--python-version", "3.11", "--implementation", "cp",
     "--abi", "cp311", "--abi", "abi3", "--abi", "none"],
)


def runtime_roots() -> list[Requirement]:
    """`[project].dependencies` of pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def applies(requirement: Requirement) -> bool:
    """Whether a requirement (no extras asked for) applies to the image's interpreter."""
    return requirement.marker is None or Marker(str(requirement.marker)).evaluate(MARKER_ENV)


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
    for i, platform in enumerate(_PLATFORMS):
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
               "The image builder's tools: mypy (mypyc), setuptools and wheel, with what they need.\n"
               "Generated by `python -m devtools.lockfile`; do not edit.", Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
