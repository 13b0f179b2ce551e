"""The matrix's backend probes with fewer processes: the in-process backends of one kind of lock
server constructed and closed one after the other in ONE child, not one child each.

A probe child is a fresh interpreter that imports the backend (redis-py alone is ~0.12 CPU-s) and,
through :func:`lockcompare.runner.trial.construct_in_child`'s target, the whole runner: ~0.2 CPU-s
each, nine of them for the README's command, before any trial (issue 44.4: ~0.03 CPU-s per trial of
that command's 54). Here the Python backends share one child that imports only what constructing
them needs, and each still gets the same deadlines (start-up, then construct + close). An external
client (``external``: a runtime of its own to start, 1-5 s for Node) keeps a child of its own, so
that those probes still run side by side.

What a failing probe reports does not change: at the first problem in the shared child (an error, a
deadline, a child that died), the child is ended and that backend and every one not yet probed are
probed again one child each, as before — the shared child is only the fast path for backends that
construct cleanly.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

from lockcompare.backends import BackendConfig, load_backend, traits_of
from lockcompare.infra import cgroup
from lockcompare.infra.lifecycle import SPAWN, die_with_parent, kill_and_reap_group
from lockcompare.infra.messages import send


def probe_in_children(names: Sequence[str], *, config: BackendConfig, timeout_s: float) -> list[str]:
    """Each backend's probe problem ("" if it constructed and closed), in the order of ``names``."""
    from lockcompare.runner.trial import construct_in_child  # the parent has it loaded; the child must not

    shared = [name for name in names if not _is_external(name)]
    alone = [name for name in names if name not in set(shared)]
    with ThreadPoolExecutor(max_workers=max(1, len(alone) + 1), thread_name_prefix="probe") as each:
        futures = {name: each.submit(construct_in_child, name, config=config, timeout_s=timeout_s) for name in alone}
        found = dict(zip(shared, construct_all_in_child(shared, config=config, timeout_s=timeout_s), strict=True))
        found.update({name: future.result() for name, future in futures.items()})
    return [found[name] for name in names]


def _is_external(name: str) -> bool:
    """True for an external client (or a backend that does not load here: its own child says why)."""
    try:
        return traits_of(load_backend(name)).external
    except Exception:  # noqa: BLE001 - any load problem is the probe's to report, in a child of its own
        return True


def construct_all_in_child(names: Sequence[str], *, config: BackendConfig, timeout_s: float) -> list[str]:
    """Construct and close each of ``names`` in turn in one spawned process; the problem of each ("").

    After the first problem the rest are probed one child each (:func:`construct_in_child`), so
    every message is the one a probe of its own gives.
    """
    from lockcompare.runner.trial import CONSTRUCT_TIMEOUT_S, construct_in_child
    from lockcompare.runner.worker import START_TIMEOUT_S

    if len(names) < 2:
        return [construct_in_child(name, config=config, timeout_s=timeout_s) for name in names]
    parent_end, child_end = SPAWN.Pipe(duplex=False)
    # In a cgroup too: a helper that daemonises in construct() must not outlive the probe.
    proc = cgroup.start_in_cgroup(target=_construct_each, args=(list(names), config, child_end))
    child_end.close()
    passed: list[str] = []
    try:
        for index in range(len(names)):
            if not parent_end.poll(START_TIMEOUT_S) or parent_end.recv() != ("constructing", index):
                break
            if not parent_end.poll(max(timeout_s, CONSTRUCT_TIMEOUT_S)) or parent_end.recv() != ("ok", index):
                break
            passed.append("")
    except (EOFError, OSError):
        pass
    finally:
        parent_end.close()
        kill_and_reap_group(proc)
        cgroup.release(proc.pid)
    return passed + [construct_in_child(name, config=config, timeout_s=timeout_s) for name in names[len(passed) :]]


def _construct_each(names: list[str], config: BackendConfig, conn: Connection) -> None:
    """The shared child: ("constructing", i) before each backend, ("ok", i) after its close; at the
    first error it says what and stops (the parent probes the rest one child each)."""
    die_with_parent()
    try:
        for index, name in enumerate(names):
            cls = load_backend(name)
            send(conn, ("constructing", index))
            cls(config=config).close()
            send(conn, ("ok", index))
    except BaseException as exc:  # noqa: BLE001 - reported as data
        send(conn, ("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
