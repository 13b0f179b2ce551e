"""The layers: analysis and render (what the offline commands table, report, compare and history
compute with) import no redis and no runner, so results can be read and re-rendered anywhere; scenario
imports no faults; no package imports another that imports it back; `import lockcompare.cli` loads
no server code; every lockcompare exception is drawn in errors.py's tree."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import defaultdict
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "lockcompare"

BLOCKER = """
import importlib, pkgutil, sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("redis", "psycopg") or name.startswith(
            ("lockcompare.runner", "lockcompare.faults", "lockcompare.infra")
        ):
            raise ImportError(f"blocked: {name}")

sys.meta_path.insert(0, Block())
import lockcompare.analysis, lockcompare.render, lockcompare.scenario
failed = []
for package in (lockcompare.analysis, lockcompare.render, lockcompare.scenario):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        try:
            importlib.import_module(module.name)
        except ImportError as exc:
            failed.append(f"{module.name}: {exc}")
print("\\n".join(failed) or "ok")
"""


def test_analysis_render_and_spec_import_without_redis_the_runner_faults_or_infra() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stdout + out.stderr


def test_the_blocker_would_notice_an_import_of_redis() -> None:
    """The check can fail: a module that imports redis is caught by the same blocker."""
    probe = BLOCKER.replace("import lockcompare.analysis,", "import redis, lockcompare.analysis,")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode != 0 and "blocked: redis" in out.stderr


# --- the package graph, from the source -----------------------------------------------------------


def _load_import_graph() -> ModuleType:
    """scripts/import_graph.py: the module graph from the source, every import form (its docstring)."""
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and annotations look their module up
    spec.loader.exec_module(module)
    return module


import_graph = _load_import_graph()
_package = import_graph.package_of


def package_graph() -> dict[str, set[str]]:
    """Package -> the packages its modules import (``errors`` and ``files`` count as packages)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph.module_graph(SOURCE).items():
        graph[_package(module)] |= {_package(name) for name in targets} - {_package(module)}
    return graph


def test_the_graph_sees_every_import_form(tmp_path: Path) -> None:
    """``from lockcompare import X``, ``import lockcompare.x.y``, relative imports (from a module and
    from a package's __init__), imports inside functions; not what only the type checker imports."""
    source = tmp_path / "lockcompare"
    for name in ("a", "b", "c", "d", "e", "f", "pkg/__init__", "pkg/inner", "pkg/sub", "g"):
        (source / f"{name}.py").parent.mkdir(parents=True, exist_ok=True)
        (source / f"{name}.py").write_text("")
    (source / "__init__.py").write_text("")
    (source / "g.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from lockcompare import a\n"
        "import lockcompare.pkg.inner\n"
        "from lockcompare.b import something\n"
        "from . import c\n"
        "def late():\n    from lockcompare import d\n"
        "if TYPE_CHECKING:\n    from lockcompare import e\n"
    )
    (source / "pkg" / "inner.py").write_text("from .sub import x\nfrom .. import f\n")
    (source / "pkg" / "__init__.py").write_text("from . import sub\n")
    graph = import_graph.module_graph(source)
    assert graph["lockcompare.g"] == {f"lockcompare.{m}" for m in ("a", "pkg.inner", "b", "c", "d")}
    assert graph["lockcompare.pkg.inner"] == {"lockcompare.pkg.sub", "lockcompare.f"}
    assert graph["lockcompare.pkg"] == {"lockcompare.pkg.sub"}


def test_no_module_circle_in_the_runner() -> None:
    """Plan, then execute: matrix -> executors -> trial, and nothing climbs back (issue 50)."""
    circles = [c for c in import_graph.cycles(import_graph.module_graph(SOURCE)) if _package(c[0]) == "runner"]
    assert circles == []


def test_no_module_circle_in_infra() -> None:
    """A package per server kind (issue 50): no circle within a kind's package, across packages, or the core."""
    circles = [c for c in import_graph.cycles(import_graph.module_graph(SOURCE)) if _package(c[0]) == "infra"]
    assert circles == []


def test_the_circle_check_would_notice_a_circle() -> None:
    assert import_graph.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_package_imports_one_that_imports_it_back() -> None:
    graph = package_graph()
    for a, b in KNOWN_LATE:
        graph[a].discard(b)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        pytest.fail(f"a package cycle: {' -> '.join(exc.args[1])}")
    assert order.index("errors") < order.index("scenario") < order.index("faults") < order.index("runner")


#: Late imports that cross a layer, each with its reason (none may be added without one).
KNOWN_LATE: dict[tuple[str, str], str] = {}


def test_scenario_imports_no_faults_and_analysis_no_runner_or_infra() -> None:
    graph = package_graph()
    graph["scenario"] -= {b for a, b in KNOWN_LATE if a == "scenario"}
    assert not graph["scenario"] & {"faults", "runner", "evaluation", "cli", "analysis", "render"}, graph["scenario"]
    assert not graph["analysis"] & {"runner", "infra", "faults", "backends", "evaluation", "cli"}, graph["analysis"]
    assert not graph["render"] & {"runner", "infra", "faults", "backends", "evaluation", "cli"}, graph["render"]


def test_the_graph_would_notice_a_cycle() -> None:
    graph = package_graph() | {"errors": {"cli"}}
    with pytest.raises(CycleError):
        list(TopologicalSorter(graph).static_order())


# --- what `lockcompare` loads before it runs a command --------------------------------------------

LOADED = """
import sys
import lockcompare.cli
print("\\n".join(sorted(m for m in sys.modules if m.split(".")[0] in ("lockcompare", "redis", "psycopg"))))
"""


def test_importing_the_cli_loads_no_server_code() -> None:
    """`lockcompare --help` and the offline commands: each command imports what it runs, when it runs.
    Of infra only infra/redis/client.py and its package (URL checks, the password variable's name:
    redis-py itself is imported when a client connects)."""
    out = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True, check=True, timeout=60)
    loaded = set(out.stdout.split())
    assert "lockcompare.cli.measure" in loaded  # the commands are registered
    heavy = {m for m in loaded if m.split(".")[0] in ("redis", "psycopg")}
    heavy |= {m for m in loaded if m.startswith(("lockcompare.runner", "lockcompare.faults", "lockcompare.backends"))}
    heavy |= {m for m in loaded if m.startswith("lockcompare.infra.")} - {
        "lockcompare.infra.redis",
        "lockcompare.infra.redis.client",
    }
    assert not heavy, sorted(heavy)


# --- the offline commands with redis and psycopg blocked ------------------------------------------

OFFLINE = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("redis", "psycopg"):
            raise ImportError(f"blocked: {name}")

sys.meta_path.insert(0, Block())
args = sys.argv[1:]
if args[0] == "render.docs":
    from lockcompare.render.docs import main as render_docs
    sys.exit(render_docs(args[1:]))
sys.argv = ["lockcompare", *args]
from lockcompare.cli import main
main()
"""


def _offline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", OFFLINE, *args], capture_output=True, text=True, timeout=300, check=False, cwd=ROOT
    )


@pytest.fixture(scope="module")
def few_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two cells of results/reproduction.csv beside its histories (a report of all 940 rows takes minutes)."""
    lines = (ROOT / "results" / "reproduction.csv").read_text().splitlines(keepends=True)
    header, rows = (
        lines[0],
        [line for line in lines[1:] if ",single,client-pause," in line or ",none,baseline," in line],
    )
    directory = tmp_path_factory.mktemp("offline")
    (directory / "reproduction.csv").write_text(header + "".join(rows))
    (directory / "reproduction.histories").symlink_to(ROOT / "results" / "reproduction.histories")
    return directory / "reproduction.csv"


@pytest.mark.parametrize(
    "args",
    [
        ("table", "results/reproduction.csv"),
        ("compare", "results/reproduction.csv", "results/reproduction.csv"),
    ],
    ids=lambda args: args[0],
)
def test_an_offline_command_runs_with_redis_and_psycopg_blocked(args: tuple[str, ...]) -> None:
    done = _offline(*args)
    assert done.returncode == 0, done.stderr
    assert "blocked" not in done.stderr


def test_docs_render_with_redis_and_psycopg_blocked(tmp_path: Path) -> None:
    csv = ROOT / "results" / "reproduction.csv"
    doc = tmp_path / "doc.md"
    doc.write_text(
        f"<!-- table: {csv} backend=single experiment=baseline -->\n<!-- /table -->\n"
        "<!-- faultkinds -->\n<!-- /faultkinds -->\n"
    )
    done = _offline("render.docs", str(doc))
    assert done.returncode == 0, done.stderr
    assert "| single " in doc.read_text() and "| `node-freeze` |" in doc.read_text()


@pytest.mark.needs("plot")
def test_report_and_the_history_plot_run_with_redis_and_psycopg_blocked(few_rows: Path, tmp_path: Path) -> None:
    report = _offline("report", str(few_rows), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "report" / "README.md").is_file()
    history = sorted((few_rows.parent / "reproduction.histories").glob("single.client-pause.*"))[0]
    for extra in ((), ("--plot", str(tmp_path / "timeline.png"))):
        shown = _offline("history", str(history), "--to-ms", "500", *extra)
        assert shown.returncode == 0, shown.stderr
    assert (tmp_path / "timeline.png").stat().st_size > 0


def test_the_offline_check_would_notice_redis() -> None:
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE.replace("args = sys.argv[1:]", "import redis"), "table", "x"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "blocked: redis" in done.stderr


# --- one exception tree -------------------------------------------------------------------------


def test_every_lockcompare_error_lives_in_errors_py_and_is_drawn_in_its_tree() -> None:
    import lockcompare.cli
    import lockcompare.evaluation.conformance
    import lockcompare.infra.cluster
    import lockcompare.runner.matrix  # noqa: F401
    from lockcompare import errors

    def subclasses(cls: type) -> set[type]:
        found = set(cls.__subclasses__())
        return found.union(*(subclasses(c) for c in found)) if found else found

    # lockcompare's own errors only: a test plug-in may subclass one (tests/plugins), as a user's may
    every = {c for c in subclasses(errors.LockcompareError) if c.__module__.startswith("lockcompare")}
    assert {c.__name__ for c in every if c.__module__ != "lockcompare.errors"} == set()
    assert {c.__name__ for c in every if f"── {c.__name__} " not in (errors.__doc__ or "")} == set()
