"""The installation of the project the suite tests: where it puts the `worker` package (site-packages for a wheel,
this checkout for an editable install), and whether it holds the native module and from which sources it was built."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
import sysconfig
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "harness-agui-worker"
EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _distribution() -> metadata.Distribution:
    """The project as installed where pip installs into this Python, not the metadata an editable install leaves
    in the checkout (which `python -m` would find first); PackageNotFoundError when it is not installed."""
    paths = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
    for dist in metadata.Distribution.discover(name=DISTRIBUTION, path=paths):
        return dist
    raise metadata.PackageNotFoundError(DISTRIBUTION)


def editable() -> bool:
    """Whether the installation is an editable one (`pip install -e`), which imports a checkout's sources."""
    direct = json.loads(_distribution().read_text("direct_url.json") or "{}")
    return bool(direct.get("dir_info", {}).get("editable"))


def installed_package() -> Path:
    """The `worker` directory the installation imports; PackageNotFoundError when the project is not installed."""
    dist = _distribution()
    if editable():
        url = json.loads(dist.read_text("direct_url.json") or "{}")["url"]
        return Path(unquote(urlparse(url).path)).resolve() / "worker"
    return Path(str(dist.locate_file("worker"))).resolve()


def native_module_file() -> Path | None:
    """The native extension module (`worker._native_core`) the installation holds, or None for a pure build."""
    found = sorted(p for p in installed_package().glob("_native_core.*") if p.name.endswith(EXTENSION_SUFFIXES))
    return found[0].resolve() if found else None


def checkout_native_digest() -> str:
    """The digest of the checkout's crate sources, as setup.py embeds it in the module it builds."""
    spec = importlib.util.spec_from_file_location("_harness_agui_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # defines native_digest; builds nothing (not run as __main__)
    digest: str = setup.native_digest()
    return digest


def child_path() -> dict[str, str]:
    """Environment variables that give every Python the suite starts the path pytest's append import mode gives the
    suite: this Python's site-packages (the installation) first, then the checkout (for tests, devtools and the
    processors that tests name), and never the working directory, which is the checkout."""
    paths = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), str(ROOT)])
    return {"PYTHONSAFEPATH": "1", "PYTHONPATH": os.pathsep.join(paths)}


def imported_package() -> Path:
    """The `worker` directory that `import worker` loads in this process."""
    spec = importlib.util.find_spec("worker")
    assert spec is not None and spec.origin is not None, "worker is not importable"
    return Path(spec.origin).resolve().parent


def differing_sources() -> list[str]:
    """The `worker/` sources (relative paths) in which the installation and the checkout differ: none for an
    editable install; for a wheel, which ships every source beside its compiled module, those changed since."""
    installed, ours = installed_package(), (ROOT / "worker").resolve()
    if installed == ours:
        return []
    theirs = {p.relative_to(installed).as_posix() for p in installed.rglob("*.py")}
    mine = {p.relative_to(ours).as_posix() for p in ours.rglob("*.py")}
    changed = [n for n in sorted(mine & theirs) if (ours / n).read_bytes() != (installed / n).read_bytes()]
    return sorted(mine ^ theirs) + changed


def problem() -> str | None:
    """Why a test run would not test this Python's installation of the project, or None."""
    try:
        installed = installed_package()
    except metadata.PackageNotFoundError:
        return f"{DISTRIBUTION} is not installed in this Python: run scripts/test.sh (or pip install -e '.[test]')"
    imported = imported_package()
    if imported != installed:
        return (f"the suite would import {imported}, not the installed package {installed}: run .venv/bin/pytest "
                "or python -P -m pytest (python -m pytest puts the working directory first on the path)")
    differing = differing_sources()
    if differing:
        more = f" and {len(differing) - 1} more" if len(differing) > 1 else ""
        return (f"the installed package {installed} was built from other sources than the checkout's (worker/"
                f"{differing[0]}{more}): run scripts/test.sh to build and install it again")
    module = native_module_file()
    if module is not None and _embedded_digest() != checkout_native_digest():
        return (f"the installed native module {module} was built from other sources than the checkout's native/: "
                "run scripts/test.sh to build and install it again")
    return None


def _embedded_digest() -> str:
    digest: str = importlib.import_module("worker._native_core").SOURCE_DIGEST
    return digest
