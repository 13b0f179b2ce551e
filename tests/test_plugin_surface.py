"""The plug-in surface: what `lockcompare` exports for backends and server kinds imports, is the
documented modules' own objects, and every name docs/plugins.md and docs/clients.md tell an author
to import exists (an example that no longer imports is a broken promise, not a typo)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import lockcompare

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "docs" / "plugins.md", ROOT / "docs" / "clients.md"]


def test_every_export_imports_and_is_the_documented_modules_own() -> None:
    from lockcompare.backends import base
    from lockcompare.infra import kinds

    assert sorted(lockcompare.__all__) == sorted([*lockcompare.BACKEND_API, *lockcompare.KIND_API, "__version__"])
    for name in lockcompare.BACKEND_API:
        assert getattr(lockcompare, name) is getattr(base, name)
    for name in lockcompare.KIND_API:
        assert getattr(lockcompare, name) is getattr(kinds, name)
    for name in lockcompare.__all__:
        assert f"`{name}`" in (lockcompare.__doc__ or "").replace(":class:", "") or name.startswith("__"), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        lockcompare.Nothing  # noqa: B018


def test_importing_lockcompare_loads_no_plug_in_base_until_asked() -> None:
    """The exports are lazy: the offline commands import lockcompare without redis or the infra."""
    probe = "import sys, lockcompare; print(sorted(m for m in sys.modules if m.startswith(('lockcompare.', 'redis'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_kind_plug_in_satisfies_the_exported_interface() -> None:
    """What a server-kind plug-in writes against (tests/plugins/valkey2_dist) is the exported ServerKind."""
    sys.path.insert(0, str(ROOT / "tests" / "plugins" / "valkey2_dist"))
    try:
        plugin = importlib.import_module("lockcompare_valkey2")
    finally:
        sys.path.pop(0)
    assert isinstance(plugin.VALKEY2, lockcompare.ServerKind)
    assert isinstance(plugin.VALKEY2.capabilities, lockcompare.Capabilities)


# The entry-point groups pyproject.toml declares: a doc names them in the same dotted form as a module.
ENTRY_POINT_GROUPS = frozenset(
    group
    for group in tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["entry-points"]
    if group.startswith("lockcompare.")
)


def _documented_imports() -> list[tuple[str, str]]:
    """(module, name) of every ``from lockcompare... import a, b`` and every dotted
    ``lockcompare.x.y`` (a module, or a name in one) the docs show."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text()
        for module, names in re.findall(r"from (lockcompare[\w.]*) import ([\w, ]+)", text):
            found += [(module, name.strip()) for name in names.split(",") if name.strip()]
        for dotted in re.findall(r"`(lockcompare(?:\.\w+)+)", text):
            if dotted in ENTRY_POINT_GROUPS:
                continue  # a group a plug-in registers under, not a module (test_entry_point_groups)
            module, _, name = dotted.rpartition(".")
            found.append((module, name))
    return sorted(set(found))


def test_the_docs_show_imports_at_all() -> None:
    assert ("lockcompare.testing", "BackendContract") in _documented_imports()


@pytest.mark.parametrize(("module", "name"), _documented_imports(), ids=lambda x: x)
def test_every_name_the_docs_tell_an_author_to_import_exists(module: str, name: str) -> None:
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("lockcompare"):
            pytest.skip(f"{module} needs {exc.name}")  # an extra's module (the doctests name the install)
        raise
    if not hasattr(imported, name):
        importlib.import_module(f"{module}.{name}")  # a submodule
