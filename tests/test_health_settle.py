"""A lock server silent at a trial's end gets a moment to answer before the trial calls it dead: a
consensus member rejoining after a healed partition re-elects first (infra/health.py)."""

from __future__ import annotations

import os
import signal
import threading

from lockcompare.infra import health
from lockcompare.infra.cluster import open_cluster


def test_a_server_silent_for_a_moment_is_not_dead_but_one_that_stays_silent_is() -> None:
    with open_cluster(node_count=2) as cluster:
        pid = cluster.node_server(1).pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # silent, as a re-electing member is
        try:
            assert health.dead_nodes(cluster, node_count=2) == [1]  # no settling: dead at once
            waker = threading.Timer(0.5, os.kill, (pid, signal.SIGCONT))
            waker.start()
            assert health.dead_nodes(cluster, node_count=2, settle_s=5.0) == []  # answered within the settle
            waker.join()
            os.kill(pid, signal.SIGSTOP)
            assert health.dead_nodes(cluster, node_count=2, settle_s=0.5) == [1]  # still silent: dead
        finally:
            os.kill(pid, signal.SIGCONT)
