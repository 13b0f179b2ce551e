"""What a test may expect of a correct lock whatever the machine is doing.

A lease lock is safe only while its holder finishes within the TTL. At ``--time-scale 0.1`` the
baseline leaves 70 ms of slack (TTL 100 ms, work 30 ms), and a CPU-throttled CI machine stalls every
process of a run for tens of milliseconds at a time: a lease can then expire under its holder and
cost an update. That is the lease's known limit, which the experiments measure; it is not what the
tests that run trials for another purpose (isolation, healing, resuming) are about. They check what
holds on any machine: every planned section ran, the trial could be judged, and no lease was ever
granted while another worker's lease was valid by its own deadline (``grants_while_held``).
"""

from __future__ import annotations

from typing import Any

from lockcompare.analysis.checker import TrialMetrics


def assert_lock_held_up(metrics: TrialMetrics | dict[str, Any]) -> None:
    """For a trial's metrics or its results row (typed, or as csv.DictReader gives it)."""
    m = metrics if isinstance(metrics, dict) else metrics.as_row()
    assert m["verdict"] != "unknown", m["problem"]
    assert int(m["entries"]) == int(m["entries_planned"]), m
    assert int(m["grants_while_held"]) == 0, m


#: How ``matrix`` without ``--backends`` names a registered backend it leaves out because an optional
#: part (Node clients, ZooKeeper, an extra) is not installed here (cli/options.py: _default_backends).
SKIPPED_OPTIONAL_PREFIX = "lockcompare: skipping "


def error_lines(stderr: str) -> list[str]:
    """The non-empty lines of ``stderr`` other than the "skipping <backend>: not viable here" notes,
    which depend on what this machine has installed, not on the refusal a test is about."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and not (line.startswith(SKIPPED_OPTIONAL_PREFIX) and "not viable here" in line)
    ]
