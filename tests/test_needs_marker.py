"""@pytest.mark.needs: a test that needs a server kind or an extra missing here skips with one line
naming the install — the kind's own problem(), fed by the registry — and a name that is neither is a
usage error, not a silent pass."""

from __future__ import annotations

import pytest

from lockcompare.infra.kinds import registered
from needs import EXTRAS, missing, missing_among


class _Absent:
    """A kind that cannot run here, saying what to install (as every kind's problem() does)."""

    name = "absent"

    def problem(self, *, binary: str | None = None) -> str:
        return "no absent binary: pip install 'lockcompare[absent]'"


def test_a_missing_kind_skips_with_its_own_problem() -> None:
    said = missing_among("absent", kinds={"absent": _Absent()})  # type: ignore[dict-item]
    assert said == "the absent server kind is not available here: no absent binary: pip install 'lockcompare[absent]'"


def test_a_kind_that_runs_here_needs_nothing() -> None:
    kind = next(name for name, kind in registered().items() if not kind.problem())  # redis or valkey, always
    assert missing(kind) == ""


def test_a_missing_extra_names_its_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "plot", "no_such_module_anywhere")
    assert missing_among("plot", kinds={}) == "needs no_such_module_anywhere: pip install -e '.[plot]'"


def test_a_name_that_is_neither_is_a_usage_error() -> None:
    with pytest.raises(pytest.UsageError, match=r"needs\('nonsense'\): not a server kind"):
        missing_among("nonsense", kinds=registered())


@pytest.mark.needs("redis")
def test_the_marker_lets_a_test_run_where_its_kind_can(cluster: object) -> None:
    assert cluster is not None
