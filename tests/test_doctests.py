"""The pure packages' docstring examples run as tests (issue 39): analysis/, render/ and scenario/ show
their functions on hand-built inputs, and an example that no longer holds fails here."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import lockcompare.analysis
import lockcompare.render
import lockcompare.scenario

PURE_PACKAGES = (lockcompare.analysis, lockcompare.render, lockcompare.scenario)


def _modules() -> list[str]:
    names = []
    for package in PURE_PACKAGES:
        names.append(package.__name__)
        names += [info.name for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")]
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_the_docstring_examples_hold(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:  # an optional extra (matplotlib for plots)
        pytest.skip(f"{name}: {exc} (pip install -e '.[plot]')")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
