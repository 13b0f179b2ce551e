"""Issue 43.1, the parts without a wheel: where the shipped clients are found, `clients install` into
the per-user cache, an installed build's recorded revision, and --resume with an unknown revision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockcompare.backends import describe_backends
from lockcompare.backends.external import install, locate
from lockcompare.errors import ResultsFileError
from lockcompare.infra.provenance import BUILD_INFO, build_revision
from lockcompare.runner import outfile

CHECKOUT_CLIENTS = Path(__file__).resolve().parents[1] / "clients"
REV = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def as_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """lockcompare as a wheel sees it: no checkout beside the package, its sources packaged (here: the
    checkout's), the per-user cache in tmp_path."""
    monkeypatch.delenv(locate.ENV_CLIENTS_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(locate, "source_tree", lambda: None)
    monkeypatch.setattr(locate, "packaged_sources", lambda: CHECKOUT_CLIENTS)
    monkeypatch.setattr(install, "packaged_sources", lambda: CHECKOUT_CLIENTS)
    return tmp_path / "lockcompare" / "clients"


def _problems() -> dict[str, str]:
    return {info.name: info.problem for info in describe_backends() if info.name.startswith("node-")}


def test_not_installed_the_shipped_clients_are_not_viable_and_say_how_to_install(as_installed: Path) -> None:
    where = locate.locate()
    assert (where.directory, where.origin) == (as_installed, "not installed")
    problems = _problems()
    assert len(problems) == 5 and all("run `lockcompare clients install`" in p for p in problems.values()), problems


def test_installed_into_the_cache_they_are_found_there_and_another_builds_copy_is_refused(as_installed: Path) -> None:
    target, origin, steps = install.install_clients(only=["python"], revision=REV)
    assert (target, origin) == (as_installed, "the per-user cache")
    assert [(s.client, s.status) for s in steps] == [("python", "done")]
    assert (as_installed / "node" / "package-lock.json").is_file() and not (
        as_installed / "node" / "node_modules"
    ).exists()
    assert json.loads((as_installed / locate.STAMP).read_text())["source_revision"] == REV
    assert locate.locate() == locate.Location(as_installed, "the per-user cache")
    # Copied but npm ci not run: listed as not viable, with the one command that installs them.
    assert all("node_modules/.package-lock.json missing" in p and "lockcompare clients install node" in p
               for p in _problems().values())  # fmt: skip
    stamp = json.loads((as_installed / locate.STAMP).read_text())
    (as_installed / locate.STAMP).write_text(json.dumps(dict(stamp, sources_sha256="0" * 64)))
    assert "another lockcompare build's clients" in locate.locate().problem
    assert all("another lockcompare build's clients" in p for p in _problems().values())


def test_the_clients_dir_variable_comes_first(
    as_installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(locate.ENV_CLIENTS_DIR, str(tmp_path / "mine"))
    assert locate.locate() == locate.Location(tmp_path / "mine", "$LOCKCOMPARE_CLIENTS_DIR")
    assert install.install_target() == (tmp_path / "mine", "$LOCKCOMPARE_CLIENTS_DIR")


def test_an_installed_build_says_the_revision_it_was_built_from(tmp_path: Path) -> None:
    assert build_revision(tmp_path) is None  # no record: the package runs from a checkout (git is asked)
    (tmp_path / BUILD_INFO).write_text(json.dumps({"revision": REV, "dirty": False}))
    assert build_revision(tmp_path) == REV
    (tmp_path / BUILD_INFO).write_text(json.dumps({"revision": REV, "dirty": True}))
    assert build_revision(tmp_path) == REV + "+dirty"
    (tmp_path / BUILD_INFO).write_text("not json")
    assert build_revision(tmp_path) == ""


@pytest.mark.parametrize(
    ("running", "held", "refused"),
    [(REV, REV, False), (REV, "", True), ("", REV, True), ("", "", False), (REV, REV + "+dirty", True)],
)
def test_resume_refuses_when_either_revision_is_unknown_and_they_differ(
    running: str, held: str, refused: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outfile, "source_revision", lambda: running)
    rows = [{"trial_id": "t0", "source_revision": held}]
    out = tmp_path / "r.csv"
    if refused:
        with pytest.raises(ResultsFileError, match=r"holds trials of revision .*--allow-mixed-revisions"):
            outfile._check_revisions(out, rows, allow_mixed_revisions=None)
    else:
        outfile._check_revisions(out, rows, allow_mixed_revisions=None)
    outfile._check_revisions(out, rows, allow_mixed_revisions="a reason")  # the escape always lets it through
