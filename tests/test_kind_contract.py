"""Every registered kind of lock server keeps the same lifecycle contract (issue 39): one
parametrized test over the registry instead of a copy per kind, so a new kind — a plug-in's too —
is checked the moment it is registered.

For each kind that can run here: one node started answers at its URL and is owned by its kind; a
crash (SIGKILL) leaves it not answering; a restart brings it back on the same URL; a stop ends it;
cleanup leaves no process of it running. A kind that cannot run here skips with its own one line.
"""

from __future__ import annotations

import time

import pytest

from lockcompare.infra.kinds import ServerKind, registered
from lockcompare.processes import process_alive

ANSWER_TIMEOUT_S = 2.0
#: How long a restarted server may take to answer (a JVM, PostgreSQL's recovery).
RESTART_WITHIN_S = 30.0


def _answers_within(kind: ServerKind, url: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if kind.answers(url, timeout_s=ANSWER_TIMEOUT_S):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.full
@pytest.mark.parametrize("name", sorted(registered()))
def test_a_kind_starts_crashes_restarts_and_stops_one_node(name: str) -> None:
    kind = registered()[name]
    problem = kind.problem()
    if problem:
        pytest.skip(f"{name}: {problem}")
    try:
        [node] = kind.start_nodes(count=1)
    except Exception as exc:  # noqa: BLE001 - a kind that needs more than one node (sentinel: a set) says so
        pytest.skip(f"{name}: cannot start a single lock node here: {exc}")
    try:
        url = node.url
        assert kind.owns(url), (name, url)
        assert _answers_within(kind, url, RESTART_WITHIN_S), f"{name}: a started node does not answer at {url}"
        assert kind.version(url), name
        pid = node.pid
        node.crash()
        assert not kind.answers(url, timeout_s=0.5), f"{name}: a crashed node still answers"
        node.restart()
        assert node.url == url, f"{name}: restarted elsewhere"
        assert _answers_within(kind, url, RESTART_WITHIN_S), f"{name}: a restarted node does not answer"
        assert node.pid != pid or pid is None
        node.stop()
        assert not node.is_running()
    finally:
        node.stop()
        node.cleanup()
    assert node.pid is None or not process_alive(node.pid), f"{name}: a process of the node is left after cleanup"
