"""Every backend of a run probed at once, while the main thread warms the workers.

Before any trial the matrix constructs and closes each backend once in a child process
(a plug-in that cannot be constructed is one load error, not a matrix of
``unknown`` rows). One after the other, on a cluster of each kind of lock servers started one after
the other, then the warm workers: on the issue-44 slice (zk-lock, node-redlock, single) that was
4.3 s of probes and 3.8 s of workers before the first trial, with the CPUs mostly idle (a Node
client and a JVM session mostly wait). Here each kind's probes run on a thread of their own (each
backend's child on its own thread too), the cluster each kind needs comes from the pool (which
starts it on its own threads), and ``meanwhile`` (the workers' prestart) runs in the calling
thread, which must be the one the workers outlive with (PR_SET_PDEATHSIG follows the thread).

A probe's child is started and reaped by the thread that asked for it, so it may die with that
thread: it lives only as long as its probe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from lockcompare.backends import BackendConfig
from lockcompare.errors import BackendLoadError
from lockcompare.infra.cluster import ClusterShape
from lockcompare.runner.probe_child import probe_in_children
from lockcompare.runner.scheduler import ClusterSource


def probe_concurrently(
    groups: Sequence[tuple[ClusterShape, Sequence[str]]],
    *,
    clusters: ClusterSource,
    node_count: int | None,
    timeout_s: float,
    meanwhile: Callable[[], None] = lambda: None,
) -> None:
    """Probe each group's backends (names, in order) on a cluster of the group's shape, all at once;
    run ``meanwhile`` in this thread; then raise the first failure in plan order."""

    def group(shape: ClusterShape, names: Sequence[str]) -> list[tuple[str, str]]:
        cluster = clusters.acquire(shape)
        try:
            config = BackendConfig(node_urls=cluster.node_urls, node_count=node_count)
            # The Python backends share one child, external clients get one each (probe_child.py).
            found = probe_in_children(names, config=config, timeout_s=timeout_s)
        finally:
            clusters.release(cluster)
        return list(zip(names, found, strict=True))

    wanted = [(shape, list(dict.fromkeys(names))) for shape, names in groups if names]
    if not wanted:
        meanwhile()
        return
    with ThreadPoolExecutor(max_workers=len(wanted), thread_name_prefix="probes") as pool:
        futures = [pool.submit(group, shape, names) for shape, names in wanted]
        meanwhile()
        for future in futures:
            for name, problem in future.result():
                if problem:
                    raise BackendLoadError(f"backend {name!r} cannot be constructed: {problem}")
