"""Every docstring example in src/ runs as a test (issues 39, 50): a module shows its functions on
hand-built inputs, and an example that no longer holds fails here. A module that cannot be imported
without an optional extra skips, naming the install."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import lockcompare
from doctest_count import RAN

#: The extra that brings each optional top-level module (pyproject.toml's optional dependencies).
EXTRA_OF = {"matplotlib": "plot", "psycopg": "postgres", "kazoo": "zookeeper", "distributed": "dask", "yaml": "test"}


def _modules() -> list[str]:
    """Every module of the package but ``__main__`` (importing it runs the command line)."""
    names = [info.name for info in pkgutil.walk_packages(lockcompare.__path__, prefix="lockcompare.")]
    return sorted(["lockcompare", *(name for name in names if name.rpartition(".")[2] != "__main__")])


@pytest.mark.parametrize("name", _modules())
def test_the_docstring_examples_hold(name: str, request: pytest.FixtureRequest) -> None:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in EXTRA_OF:
            raise
        pytest.skip(f"{name} needs {missing}: pip install -e '.[{EXTRA_OF[missing]}]'")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    if result.attempted:
        request.config.stash.setdefault(RAN, []).append((name, result.attempted))
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


def test_the_examples_are_found_across_the_packages() -> None:
    """The walk reaches beyond the pure packages: a backend's and infra's examples are run too."""
    modules = _modules()
    assert {"lockcompare.backends.renewals", "lockcompare.infra.redis.client", "lockcompare.runner.trial"} <= set(
        modules
    )
    assert not [name for name in modules if name.endswith("__main__")]
