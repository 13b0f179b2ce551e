"""Build hooks (the metadata is in pyproject.toml): what a wheel carries beyond the Python packages.

- The shipped lock clients' sources (``clients/``: Node's scripts, package.json and lock file, the Go
  and Java sources and build scripts, the reference Python client) are copied into the package as
  ``lockcompare/_clients``, without installed or built outputs (node_modules, build/).
  ``lockcompare clients install`` copies them into a per-user cache and installs or builds them there.
  The source tree keeps ``clients/`` at its root; an editable install reads it from there.
- The documentation pages (``docs/*.md`` and their pictures) are copied as ``lockcompare/_docs``:
  the CLI's help points at them, and ``lockcompare docs PAGE`` prints one from an installed wheel.
- The source revision is written to ``lockcompare/_build_info.json``: an installed wheel is not in a
  git checkout, and its rows must still say which code measured them (``--resume`` compares it).
  The sdist carries the file (written from git when the sdist is made), so a wheel built from the
  sdist records the same revision.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
CLIENTS = HERE / "clients"
DOCS = HERE / "docs"
PACKAGE = HERE / "src" / "lockcompare"
BUILD_INFO = "_build_info.json"
#: Installed or built outputs: never shipped (they are made per machine by `lockcompare clients install`).
SKIPPED = {"node_modules", "build", "__pycache__"}


def _build_info() -> dict[str, object]:
    """The revision this build is made of: the sdist's record when building from one, else git's."""
    recorded = PACKAGE / BUILD_INFO
    if recorded.is_file():
        return dict(json.loads(recorded.read_text()))
    # provenance.py's own rule (which files make a checkout dirty), loaded alone: importing the
    # package would import its dependencies, which the isolated build environment does not have.
    spec = importlib.util.spec_from_file_location("_lockcompare_provenance", PACKAGE / "infra" / "provenance.py")
    assert spec is not None and spec.loader is not None
    provenance = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(provenance)
    revision = provenance.revision_of(PACKAGE)
    return {"revision": revision.removesuffix("+dirty"), "dirty": revision.endswith("+dirty")}


def _write_build_info(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / BUILD_INFO).write_text(json.dumps(_build_info(), indent=1) + "\n")


def _copy_tree(source: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)  # a stale build/lib must not ship a file since removed
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if path.is_dir() or SKIPPED & set(relative.parts) or path.suffix == ".pyc":
            continue
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target / relative)


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install runs from the checkout: clients/ and git are there
        built = Path(self.build_lib) / "lockcompare"
        _copy_tree(CLIENTS, built / "_clients")
        _copy_tree(DOCS, built / "_docs")
        _write_build_info(built)


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        _write_build_info(Path(base_dir) / "src" / "lockcompare")


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
