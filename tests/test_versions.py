"""Issue 53.4: every row records the versions of Python and of the lock libraries and clients its
trial ran; a resume onto rows of other versions is refused like one onto another revision's."""

from __future__ import annotations

import logging
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis.results import COLUMNS, ResultsWriter, inspect_results, read_results, rewrite
from lockcompare.backends import load_backend, traits_of
from lockcompare.backends.versions import client_versions, python_version, reported_versions
from lockcompare.cli import app
from lockcompare.errors import BackendLoadError, ResultsFileError
from lockcompare.runner.matrix import run_matrix
from lockcompare.runner.mixed_versions import FileVersions
from lockcompare.scenario.parsing import Overrides

QUICK = Overrides(time_scale=0.1, rounds=3, call_timeout_ms=1500)


def test_a_python_backend_records_the_installed_versions_of_the_libraries_it_declares() -> None:
    traits = traits_of(load_backend("pottery", check_viable=False))
    assert traits.libraries == ("pottery", "redis")
    cell = client_versions(libraries=traits.libraries, external=traits.external)
    assert cell == f"pottery {version('pottery')}; redis {version('redis')}"
    assert traits_of(load_backend("sentinel-redis-py", check_viable=False)).libraries == ("redis",)  # inherited
    # lockcompare's own client (etcd over HTTP), or no lock at all: no library, said, not left empty
    assert client_versions(libraries=traits_of(load_backend("etcd", check_viable=False)).libraries, external=False) == (
        "none"
    )
    assert (
        client_versions(libraries=("no-such-distribution-h53",), external=False) == "no-such-distribution-h53 unknown"
    )


def test_libraries_must_be_a_tuple_of_names() -> None:
    class Wrong:
        summary = "wrong"
        exclusive = True
        issues_fencing_tokens = False
        libraries = "pottery"  # a str would be read as seven one-letter distributions

    with pytest.raises(BackendLoadError, match="libraries is 'pottery', expected a tuple of distribution names"):
        traits_of(Wrong)


def test_an_external_client_is_recorded_as_its_hello_said_and_an_old_one_as_unknown() -> None:
    """Hand-built histories: the ``client`` events the external backend records at each start."""
    new = {"kind": "client", "library": "redlock", "version": "4.2.0", "runtime": "node v20.1.0",
           "versions": {"redlock": "4.2.0", "ioredis": "5.4.1"}}  # fmt: skip
    restarted = dict(new, t0=5)  # a client started again (a crash): the same versions, said once
    history = [{"kind": "acquire"}, new, {"kind": "release"}, restarted]
    assert client_versions(libraries=(), external=True, history=history) == "redlock 4.2.0; ioredis 5.4.1; node v20.1.0"
    # protocol-1 clients from before the versions map: their library and version
    old = {"kind": "client", "library": "refclient", "version": "1", "runtime": "python 3.11"}
    assert reported_versions([old]) == ["refclient 1", "python 3.11"]
    assert reported_versions([{"kind": "client", "library": "x", "version": ""}]) == ["x unknown"]
    # no client ever answered hello (the trial is unknown): its versions are unknown, not guessed
    assert client_versions(libraries=(), external=True, history=[{"kind": "acquire"}]) == "unknown"
    # a hello is the client's say: the separator cannot be smuggled in, and a dump is cut
    odd = {"kind": "client", "versions": {"a;b": "1;2", **{f"p{i}": "9" * 500 for i in range(30)}}}
    parts = reported_versions([odd])
    assert parts[0] == "a,b 1,2" and len(parts) == 12 and max(map(len, parts)) <= 80 + 4


def test_rows_have_the_version_columns_and_older_rows_read_them_as_unknown(tmp_path: Path) -> None:
    assert {"python_version", "client_versions"} <= set(COLUMNS)
    out = tmp_path / "old.csv"
    old_columns = [c for c in COLUMNS if c not in ("python_version", "client_versions")]
    values = {"schema_version": "9", "backend": "single", "experiment": "baseline", "trial": "0", "workers": "2",
              "rounds": "40", "verdict": "exclusive", "entries": "80", "entries_planned": "80"}  # fmt: skip
    out.write_text(",".join(old_columns) + "\n" + ",".join(values.get(c, "") for c in old_columns) + "\n")
    found = inspect_results(out)
    assert found.needs_rewrite and found.oldest_schema == 9
    (row,) = found.rows
    assert row["python_version"] == "" and row["client_versions"] == ""  # unknown, never guessed
    rewrite(out, found.rows)  # what `lockcompare upgrade` and --resume do
    (again,) = read_results(out)
    assert again["client_versions"] == "" and not inspect_results(out).needs_rewrite


def _rows(*pairs: tuple[str, str, str]) -> list[dict[str, str]]:
    return [{"backend": b, "python_version": p, "client_versions": c} for b, p, c in pairs]


def test_resume_over_other_versions_is_refused_before_any_trial(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "r.csv"
    this = python_version()
    pottery = client_versions(libraries=("pottery", "redis"), external=False)
    FileVersions.of(out, _rows(("pottery", this, pottery)), allow=None).check_before(["pottery", "single"])  # same
    older = _rows(("pottery", this, "pottery 2.3.0; redis 4.0.0"))
    with pytest.raises(ResultsFileError, match=r"trials of pottery that ran pottery 2\.3\.0; redis 4\.0\.0; .*"
                       r"runs pottery .*mix two versions in one cell.*--allow-mixed-revisions"):  # fmt: skip
        FileVersions.of(out, older, allow=None).check_before(["pottery"])
    FileVersions.of(out, older, allow=None).check_before(["single"])  # another backend's rows: not its business
    with pytest.raises(ResultsFileError, match=rf"trials run on Python 2\.7\.18; this is Python {this}"):
        FileVersions.of(out, _rows(("single", "2.7.18", "redis 1")), allow=None).check_before(["pottery"])
    with pytest.raises(ResultsFileError, match=r"trials of pottery that ran unknown"):  # rows before schema 10
        FileVersions.of(out, _rows(("pottery", this, "")), allow=None).check_before(["pottery"])
    with caplog.at_level(logging.WARNING, logger="lockcompare"):
        FileVersions.of(out, older, allow="a patch release").check_before(["pottery"])
    assert "mixing trials of pottery that ran pottery 2.3.0" in caplog.text and "(a patch release)" in caplog.text


def test_an_external_clients_first_new_row_is_checked_against_its_rows() -> None:
    """Its versions are known only once it has started: its first row of the run is checked."""
    held = FileVersions.of(
        Path("r.csv"), _rows(("node-redlock", python_version(), "redlock 4.2.0; node v20")), allow=None
    )
    held.check_before(["node-redlock"])  # nothing to compare yet: no client has started
    held.check_row({"backend": "node-redlock", "client_versions": "redlock 4.2.0; node v20"})
    changed = FileVersions.of(Path("r.csv"), _rows(("node-redlock", python_version(), "redlock 4.2.0; node v20")),
                              allow=None)  # fmt: skip
    with pytest.raises(ResultsFileError, match=r"trials of node-redlock that ran redlock 4\.2\.0; node v20; .*"
                       r"runs redlock 5\.0\.0; node v22"):  # fmt: skip
        changed.check_row({"backend": "node-redlock", "client_versions": "redlock 5.0.0; node v22"})
    held.check_row({"backend": "node-sesame-using", "client_versions": "anything 1"})  # no rows of its own yet


def test_a_row_whose_client_never_started_is_no_version_on_either_side() -> None:
    """The reproduction stopped at its second round on three curator-mutex-checked rows recorded
    ``unknown`` (no hello within 10 s: no client ran, verdict unknown): they are no version to refuse
    a run's own rows over, and a new such row is not the client's first row to check."""
    curator = "curator-recipes 5.4.0; zookeeper 3.8.0; java 17.0.15"
    this = python_version()
    never = FileVersions.of(Path("r.csv"), _rows(("curator-mutex-checked", this, "unknown")), allow=None)
    never.check_row({"backend": "curator-mutex-checked", "client_versions": curator})
    beside = FileVersions.of(
        Path("r.csv"),
        _rows(("curator-mutex-checked", this, "unknown"), ("curator-mutex-checked", this, curator)),
        allow=None,
    )
    beside.check_row({"backend": "curator-mutex-checked", "client_versions": "unknown"})  # not its first row...
    with pytest.raises(ResultsFileError, match=r"that ran curator-recipes 5\.4\.0; .* runs curator-recipes 5\.5\.0"):
        beside.check_row({"backend": "curator-mutex-checked", "client_versions": curator.replace("5.4.0", "5.5.0")})
    # ...and a library not found (``<name> unknown``) is a version like any other
    named = FileVersions.of(Path("r.csv"), _rows(("node-redlock", this, "redlock unknown; node v20")), allow=None)
    with pytest.raises(ResultsFileError, match=r"that ran redlock unknown; node v20"):
        named.check_row({"backend": "node-redlock", "client_versions": "redlock 4.2.0; node v20"})


def test_a_trial_row_records_them_and_a_resume_over_another_version_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    run_matrix(backends=["single"], experiments=["baseline"], trials=1, overrides=QUICK, out=out)
    (row,) = read_results(out)
    assert row["python_version"] == python_version()
    assert row["client_versions"] == f"redis {version('redis')}"
    rewrite(out, [dict(row, client_versions="redis 3.5.3")])  # as if measured with another redis-py
    args = ["matrix", "--backends", "single", "--experiments", "baseline", "--trials", "2", "--time-scale", "0.1",
            "--rounds", "3", "--out", str(out), "--resume"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "trials of single that ran redis 3.5.3" in result.stderr, result.output
    assert len(read_results(out)) == 1  # refused before anything ran
    result = CliRunner().invoke(app, [*args, "--allow-mixed-revisions", "redis-py patch release"])
    assert result.exit_code == 0, result.output
    assert [r["client_versions"] for r in read_results(out)] == ["redis 3.5.3", f"redis {version('redis')}"]


def test_rows_written_by_hand_without_versions_stay_writable(tmp_path: Path) -> None:
    """A row dict without the new keys (a plug-in's tooling, an older caller) is written with them empty."""
    out = tmp_path / "w.csv"
    ResultsWriter(out).append({"schema_version": 10, "backend": "single", "experiment": "baseline", "trial": 0})
    (row,) = inspect_results(out).rows
    assert row["client_versions"] == "" and row["python_version"] == ""
