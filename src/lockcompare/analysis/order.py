"""The one order every table, report and picture lists results in: backends, then experiments.

Backends come in the order they are registered (``pyproject.toml``'s entry points, which
``tests/test_order.py`` checks against this list), then any other backend (a plug-in, a
``package.module:Class``) by name; experiments in catalogue order (``scenario/experiments.py``), then
unknown ones by name. Rows are appended to a CSV in the order trials *finish*, which with parallel
trials is no order at all: a reader looking for ``fenced × baseline`` must find it in the same
place in every table.

>>> sorted(["redlock", "my.plugin:Lock", "none", "single"], key=backend_rank)
['none', 'single', 'redlock', 'my.plugin:Lock']
>>> sorted(["client-pause", "baseline", "short-ttl"], key=experiment_rank)
['baseline', 'short-ttl', 'client-pause']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockcompare.scenario.experiments import EXPERIMENTS

#: Built-in backends in registration order (pyproject.toml's ``lockcompare.backends`` entry points).
BACKEND_ORDER = (
    "none", "single", "fenced", "redlock", "pottery", "redis-py", "atomic", "optimistic", "partitioned",
    "partitioned-skew", "pg-for-update", "pg-serializable", "idempotent", "single-renew", "redis-lock-renew",
    "redis-lock-renew-checked", "etcd", "etcd-fenced", "pg-advisory", "pg-lease", "zk-lock", "zk-lock-checked",
    "zk-fenced", "sentinel-single", "sentinel-fenced", "sentinel-redis-py", "node-redlock", "node-sesame-using",
    "node-sesame-using-checked", "node-semaphore-mutex", "node-semaphore-redlock", "etcd-go-mutex",
    "etcd-go-fenced", "curator-mutex", "curator-mutex-checked",
)  # fmt: skip


def backend_rank(name: str) -> tuple[int, str]:
    """Sort key of a backend: registered ones first, in registration order; the others by name."""
    try:
        return BACKEND_ORDER.index(name), ""
    except ValueError:
        return len(BACKEND_ORDER), name


def experiment_rank(name: str) -> tuple[int, str]:
    """Sort key of an experiment: catalogue order, then unknown names alphabetically."""
    names = list(EXPERIMENTS)
    return (names.index(name), "") if name in EXPERIMENTS else (len(names), name)


def cell_rank(row: Mapping[str, Any]) -> tuple[tuple[int, str], tuple[int, str]]:
    """Sort key of a row or cell with ``backend`` and ``experiment``."""
    return backend_rank(str(row["backend"])), experiment_rank(str(row["experiment"]))
