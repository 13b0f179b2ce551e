"""What a trial's processes cost besides their work (issue 30): a spawned worker does not re-run the
``lockcompare`` console script, and backend look-ups do not re-read every installed package."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from lockcompare import backends
from lockcompare.infra import lifecycle

TESTS = Path(__file__).parent

#: The console script pip writes for ``lockcompare = "lockcompare.__main__:main"``, plus a spawn.
_CONSOLE_SCRIPT = """
import sys
from lockcompare.__main__ import main
if __name__ == "__main__":
    sys.path.insert(0, {tests!r})
    from spawn_probe import report_imports
    from lockcompare.infra.lifecycle import SPAWN, reap_group, start_worker_process
    parent_end, child_end = SPAWN.Pipe(duplex=False)
    proc = start_worker_process(target=report_imports, args=(child_end,))
    child_end.close()
    print(parent_end.recv())
    reap_group(proc)
"""


def test_a_worker_spawned_from_the_console_script_does_not_import_the_cli(tmp_path: Path) -> None:
    script = tmp_path / "lockcompare"
    script.write_text(_CONSOLE_SCRIPT.format(tests=str(TESTS)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True)
    # Before: spawn re-ran this file in the child, importing lockcompare.cli and everything it imports.
    assert done.stdout.strip() == "[]"


def test_another_main_script_is_left_to_spawn_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    def main() -> None: ...

    user_script = types.ModuleType("__main__")
    user_script.__file__ = "/somewhere/mybench.py"  # may define the plug-in its workers load
    user_script.__spec__ = None
    user_script.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "__main__", user_script)
    lifecycle._spare_children_the_main_script()
    assert user_script.__spec__ is None


_PLUGIN_ENTRY_POINTS = """
[lockcompare.backends]
late-plugin = lockcompare.backends.single:SingleNodeLock
"""


def test_a_plugin_on_a_path_added_later_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "late-plugin" not in backends.registered_names()  # the cache is filled without it
    dist = tmp_path / "late_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: late-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(_PLUGIN_ENTRY_POINTS))
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    assert "late-plugin" in backends.registered_names()
    assert backends.load_backend("late-plugin").__name__ == "SingleNodeLock"
