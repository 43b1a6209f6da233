"""The installation of the project the suite tests: where it puts the `worker` package (site-packages for a wheel,
this checkout for an editable install), whether it holds compiled modules, and the modules setup.py compiles."""

from __future__ import annotations

import ast
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


def installed_extensions() -> dict[str, Path]:
    """The extension modules the installation's RECORD lists (none for a pure build), by dotted module name."""
    dist = _distribution()
    found = {}
    for file in dist.files or []:
        suffix = next((s for s in EXTENSION_SUFFIXES if file.name.endswith(s)), None)
        if suffix is not None:
            name = ".".join([*file.parent.parts, file.name.removesuffix(suffix)])
            found[name] = Path(str(dist.locate_file(file))).resolve()
    return found


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


def compiled_modules() -> list[str]:
    """The dotted names of the modules setup.py's COMPILED list names."""
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if [getattr(t, "id", None) for t in targets] == ["COMPILED"]:
                return [path.removesuffix(".py").replace("/", ".") for path in ast.literal_eval(node.value)]
    raise AssertionError("setup.py has no COMPILED list")


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
    stray = sorted(p for p in (ROOT / "worker").rglob("*") if p.name.endswith(EXTENSION_SUFFIXES))
    if stray:  # no build writes them there; an editable install, or the sources as the pure build, would load them
        more = f" and {len(stray) - 1} more" if len(stray) > 1 else ""
        return (f"the checkout holds compiled modules that shadow their sources ({stray[0].relative_to(ROOT)}"
                f"{more}); delete them: find worker -name '*.so' -delete")
    return None
