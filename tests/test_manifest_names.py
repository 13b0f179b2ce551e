"""Issue 53.5: a manifest backend is shown by its manifest's ``name`` — in trial ids, rows, tables
and history file names — while the row records its path (``backend_source``) to run it again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lockcompare.analysis.reproduce import matrix_command, spec_from_row
from lockcompare.backends import backend_name, load_backend
from lockcompare.backends.external.named import ENV, manifest_path
from lockcompare.backends.external.shipped import clients_dir
from lockcompare.errors import BackendLoadError, UnknownNameError
from lockcompare.runner.plan import plan_matrix
from lockcompare.scenario.parsing import Overrides

REFCLIENT = clients_dir() / "python" / "refclient.py"


@pytest.fixture(autouse=True)
def _fresh_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "{}")  # restored after the test: names remembered here do not leak


def manifest(directory: Path, *, name: str, file: str = "client.toml") -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file
    path.write_text(
        f'protocol = 1\nname = "{name}"\nsummary = "reference client"\n'
        f'command = ["{sys.executable}", "{REFCLIENT}"]\n[claims]\nexclusive = true\nissues_fencing_tokens = false\n'
    )
    return str(path)


def test_a_manifest_path_becomes_its_name_and_loads_by_it(tmp_path: Path) -> None:
    spec = manifest(tmp_path / "deep" / "folder", name="my-ref")
    assert manifest_path("my-ref") is None
    with pytest.raises(UnknownNameError, match="unknown backend 'my-ref'"):
        load_backend("my-ref", check_viable=False)
    assert backend_name(spec) == ("my-ref", str(Path(spec).resolve()))
    assert manifest_path("my-ref") == str(Path(spec).resolve())
    assert load_backend("my-ref").manifest.path == Path(spec).resolve()  # type: ignore[attr-defined]
    # a process the run spawns (a worker, a probe) knows the name from the environment
    child = subprocess.run(
        [sys.executable, "-c", "from lockcompare.backends import load_backend; print(load_backend('my-ref').__name__)"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert child.stdout.strip() == "MyRef"
    assert backend_name("single") == ("single", "") and backend_name(" pkg.mod:Cls ") == ("pkg.mod:Cls", "")


def test_the_plan_names_trials_by_the_manifests_name_and_records_the_path(tmp_path: Path) -> None:
    spec = manifest(tmp_path, name="my-ref")
    (trial,) = plan_matrix(
        backends=[spec], experiments=["baseline"], trials=1, overrides=Overrides(time_scale=0.1), node_count=None
    )
    assert trial.backend == "my-ref" and trial.backend_source == str(Path(spec).resolve())
    assert trial.trial_id.startswith("my-ref.baseline.") and str(tmp_path.name) not in trial.trial_id
    assert "backend_source" in trial.recorded_settings()
    # the same path again (--resume) plans the same trial
    (again,) = plan_matrix(
        backends=[spec], experiments=["baseline"], trials=1, overrides=Overrides(time_scale=0.1), node_count=None
    )
    assert again.trial_id == trial.trial_id


def test_a_row_of_a_named_manifest_reruns_from_its_recorded_path(tmp_path: Path) -> None:
    spec = manifest(tmp_path, name="my-ref")
    (trial,) = plan_matrix(
        backends=[spec], experiments=["baseline"], trials=1, overrides=Overrides(time_scale=0.1), node_count=None
    )
    row = {**trial.recorded_settings(), "trial_id": trial.trial_id, "resource_check": trial.resource_check.value}
    rebuilt = spec_from_row(row)
    assert rebuilt == trial  # the backend's name, and where it loads from
    command = matrix_command([row | {"trial": 0}])
    assert f"--backends {Path(spec).resolve()} --experiments baseline" in command
    no_source = matrix_command([row | {"trial": 0, "backend_source": ""}])
    assert "--backends my-ref " in no_source


def test_names_that_could_not_be_told_apart_are_refused(tmp_path: Path) -> None:
    one, two = manifest(tmp_path / "a", name="twin"), manifest(tmp_path / "b", name="twin")
    with pytest.raises(
        BackendLoadError, match=r"--backends: .*a/client.toml and .*b/client.toml are both named 'twin'"
    ):
        plan_matrix(backends=[one, two], experiments=["baseline"], trials=1, overrides=Overrides(), node_count=None)
    shadow = manifest(tmp_path / "c", name="node-redlock")
    with pytest.raises(BackendLoadError, match="named 'node-redlock', a registered backend's name"):
        backend_name(shadow)
    shipped = clients_dir() / "node" / "redlock.toml"
    assert backend_name(str(shipped)) == ("node-redlock", "")  # the shipped manifest is that backend


def test_a_manifest_whose_name_is_no_plain_name_keeps_its_path(tmp_path: Path) -> None:
    spec = manifest(tmp_path, name="my client: v2")
    assert backend_name(spec) == (spec, "")
