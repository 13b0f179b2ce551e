"""Acquire + release latency of each backend: a benchmark, not a test.

Each backend runs alone, in its own worker process (``spawn``: a fresh interpreter, not a thread of
the caller, whose GIL would otherwise sit in every measurement), one backend after another, never
two at once. A worker does ``warmup`` untimed cycles, then ``iterations`` timed ones; a cycle is one
acquire and one release of the same key, sequentially, each timed with ``perf_counter_ns``.

Rows ``<backend>-via-proxy`` (``proxied=[...]``) measure the same backend with every lock node
reached through a :class:`lockcompare.infra.proxy.LinkProxy` (one proxy process, no fault applied): the
difference to the direct row is what the proxy itself adds to each round trip, measured in the
same run, so link-fault experiments can say how much of a delay is the proxy's own.

The first rows are floors, the least a correct lock can cost, sent the fastest way the harness
has (the direct path the workers' hot calls take, :class:`lockcompare.backends.redis_direct.DirectCommands`
and :func:`lockcompare.backends.redis_fanout.fan_out`), with no backend object in between:

- ``floor``: a bare ``SET key token NX PX`` plus the compare-and-delete release script (EVALSHA) on
  lock node 0, over one connection: ``single``'s commands on ``single``'s path;
- ``floor-fanout`` (a cluster of more than one lock node): the same two commands on every lock node
  at once, one fan-out each: Redlock's requests, byte for byte, without Redlock's bookkeeping — what
  five servers' replies on this machine cost, whatever the algorithm around them.

The floors are not measured in a process of their own: every backend's process times a floor cycle
(each floor's) right before each of its own cycles, so a floor meets the same machine state as the
rows it is the floor of, and a slow stretch of the machine falls on both (issue 54: measured in a
process of its own, one block after another, the floor came out 9 µs above ``single`` in one run of
three; through redis-py's per-call layers it measured 212-238 µs against ``single``'s 121-153). A
floor row is the floor timed beside the row where it came out least (named in its ``floor beside``
column: pooled over every backend's process, it came out above ``single`` in two runs of three, the
cycles beside pottery's thread pool and redis-py's being slower), and each lock row shows, in that
column, the floor timed beside its own cycles. Every other row is read against a floor or against
``single``.

What the numbers are, and are not:

- ``p50_us`` / ``p99_us``: percentiles of the timed cycles that acquired (microseconds).
- ``ops_per_s``: those cycles divided by the time spent in them (the floors' cycles between
  them not counted).
- ``refused``: timed acquires that were refused. With one sequential client this should be 0; it
  is counted rather than retried so that a backend that blocks itself (e.g. a key left behind by a
  request still in flight after the call returned) shows up instead of being averaged away.
- ``library p50 µs`` / ``hop p50 µs`` (rows of external clients, docs/clients.md): the time the
  client reported spending inside its library (acquire + release), and the rest of each cycle — the
  JSON-lines hop to the client process and its runtime — as separate medians.
- Ratios (``x single``, ``x pottery``) compare rows measured in ONE run on one machine, one after
  another; they move with load, core count and Redis build. Re-run before quoting a number.

Example::

    >>> from lockcompare.infra.cluster import open_cluster
    >>> with open_cluster() as cluster:                                   # doctest: +SKIP
    ...     rows = run_bench(cluster=cluster, backends=["single", "pottery"], iterations=500)
    >>> print(render_bench(rows))                                         # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection

from lockcompare.analysis.stats import percentile
from lockcompare.backends import BackendConfig, load_backend, traits_of
from lockcompare.backends.redis_direct import DirectCommands
from lockcompare.backends.redis_fanout import Node, fan_out
from lockcompare.backends.redlock import RELEASE_SHA, Redlock, lock_node_urls
from lockcompare.backends.single import RELEASE_SCRIPT
from lockcompare.errors import InvalidValueError, ReleaseFailed, TrialError
from lockcompare.infra.cluster import Cluster, delete_keys_containing
from lockcompare.infra.kinds import get_kind
from lockcompare.infra.lifecycle import SPAWN, die_with_parent, reap_group, start_worker_process
from lockcompare.infra.messages import send
from lockcompare.infra.proxy import ProxySet, port_of
from lockcompare.infra.redis.client import DEFAULT_TIMEOUT_S, connect
from lockcompare.render.table import check_format, format_table
from lockcompare.runner.worker import START_TIMEOUT_S

FLOOR = "floor"
FANOUT_FLOOR = "floor-fanout"
VIA_PROXY = "-via-proxy"

#: A cycle slower than this on average means something hangs, not that a lock is slow.
_MAX_CYCLE_S = 0.5


@dataclass(frozen=True, kw_only=True)
class BenchRow:
    """One backend's figures. ``iterations`` counts the timed cycles that acquired."""

    backend: str
    iterations: int
    refused: int
    p50_us: float
    p99_us: float
    ops_per_s: float
    library_p50_us: float = math.nan  # an external client's own time in its library; nan: not reported
    hop_p50_us: float = math.nan  # the rest of the cycle: the pipe to the client and its runtime
    #: A lock row's: the p50 of the ``floor`` cycles timed beside its own, in its process.
    floor_p50_us: float = math.nan
    #: A floor row's: the row whose process its cycles were timed in (where it came out least).
    beside: str = ""


@dataclass(frozen=True, kw_only=True)
class _Job:
    """What one bench worker process is told to do (picklable)."""

    backend: str  # a backend name or spec, or FLOOR: the floors' cycles alone
    row: str  # the row its cycles go to (the backend's name, or ``<name>-via-proxy``)
    config: BackendConfig
    key: str
    iterations: int
    warmup: int
    ttl_ms: int
    #: The floors timed before each of the backend's cycles (FLOOR, FANOUT_FLOOR), on ``floor_config``'s
    #: nodes (the embedded Redis nodes: a backend's own may be etcd members, or proxies), each on a key
    #: of its own.
    floors: tuple[str, ...] = ()
    floor_config: BackendConfig | None = None


@dataclass(kw_only=True)
class _Measured:
    """One block's cycles of one row, as a worker sends them back (plain lists: picklable)."""

    samples_ns: list[int]
    refused: int
    wall_ns: int
    library_ns: list[int]


def run_bench(
    *,
    cluster: Cluster,
    backends: Sequence[str],
    iterations: int = 500,
    ttl_ms: int = 10_000,
    warmup: int = 50,
    blocks: int = 5,
    request_timeout_s: float = DEFAULT_TIMEOUT_S,
    proxied: Sequence[str] = (),
    lock_clusters: Mapping[str, Cluster] | None = None,
) -> list[BenchRow]:
    """Measure acquire + release latency: the floor rows first (``floor``, and ``floor-fanout`` on a
    cluster of several lock nodes), then one row per backend, in order.

    The iterations are split into ``blocks``; each block measures every backend once, in a
    rotated order, each in a fresh process after its own warm-up, so that a machine whose speed
    drifts (on these VMs an idle vCPU wakes slowly: loopback PING p50 was 0.2 ms with one core
    busy and 0.7-1.1 ms idle) biases no backend more than another.

    Each backend in ``proxied`` (also measured directly, or not) gets a ``<name>-via-proxy`` row
    right after its direct row: its nodes reached through link proxies with no fault (the embedded
    cluster only: the proxies listen on, and forward to, loopback).

    ``lock_clusters``: for a backend whose lock servers ``cluster`` does not serve (its ``servers``,
    e.g. etcd members; :func:`lock_servers_needed`), the cluster of that kind its rows run on.

    Unknown or unusable backends raise the errors of :func:`lockcompare.backends.load_backend`
    before any worker starts. A worker that fails raises :class:`TrialError`. Only the bench's
    own keys are touched, and they are deleted afterwards.
    """
    if iterations < 1:
        raise InvalidValueError(f"iterations must be at least 1, got {iterations}")
    if ttl_ms < 1:
        raise InvalidValueError(f"ttl_ms must be positive, got {ttl_ms}")
    if warmup < 0:
        raise InvalidValueError(f"warmup must not be negative, got {warmup}")
    for name in (*backends, *proxied):
        load_backend(name)  # fail here, once, with the loader's own message
    if proxied and not cluster.embedded:
        raise InvalidValueError("via-proxy rows need the embedded cluster (the proxies forward to loopback ports)")
    if blocks < 1 or blocks > iterations:
        raise InvalidValueError(f"blocks must be between 1 and iterations ({iterations}), got {blocks}")
    config = BackendConfig(node_urls=cluster.node_urls, request_timeout_s=request_timeout_s)
    lock_clusters = lock_clusters or {}
    configs = {
        name: BackendConfig(node_urls=lock_clusters[servers].node_urls, request_timeout_s=request_timeout_s)
        for name in backends
        if (servers := _servers(name) or "") in lock_clusters
    }
    prefix = f"lockcompare:bench:{uuid.uuid4().hex[:10]}"
    floors = (FLOOR, FANOUT_FLOOR) if len(cluster.node_urls) > 1 else (FLOOR,)
    measured = []  # the rows that run in processes of their own, each with the floors before its cycles
    for name in dict.fromkeys([*backends, *proxied]):  # each backend once, in the order given
        if name in backends:
            measured.append(name)
        if name in proxied:
            measured.append(name + VIA_PROXY)
    measured = measured or [FLOOR]  # no backend: the floors alone
    names = [*floors, *(name for name in measured if name != FLOOR)]
    # By row, a floor's by "<floor>@<the row it was timed beside>".
    samples: dict[str, list[int]] = {name: [] for name in measured if name != FLOOR}
    library: dict[str, list[int]] = {name: [] for name in measured if name != FLOOR}
    refused: dict[str, int] = {}
    wall_ns: dict[str, int] = {}
    links = (
        ProxySet(node_ports=[port_of(url) for url in cluster.node_urls], workers=1, name="bench") if proxied else None
    )
    try:
        if links is not None:
            links.start()
            proxied_config = BackendConfig(node_urls=links.node_urls(worker=0), request_timeout_s=request_timeout_s)
        for block in range(blocks):
            # Rotate the order each block: a backend measured always first (or last) would
            # always meet the same machine state.
            order = measured[block % len(measured) :] + measured[: block % len(measured)]
            for name in order:
                via_proxy = name.endswith(VIA_PROXY) and links is not None
                job = _Job(
                    backend=name.removesuffix(VIA_PROXY) if via_proxy else name,
                    row=name,
                    config=proxied_config if via_proxy else configs.get(name, config),
                    key=f"{prefix}:{names.index(name)}",
                    iterations=iterations // blocks + (1 if block < iterations % blocks else 0),
                    warmup=warmup,
                    ttl_ms=ttl_ms,
                    floors=floors,
                    floor_config=config,
                )
                for row, got in _run_worker(job).items():
                    # A floor's cycles are kept by the process they were timed in (the row beside them).
                    into = f"{row}@{name}" if row in floors else row
                    samples.setdefault(into, []).extend(got.samples_ns)
                    library.setdefault(into, []).extend(got.library_ns)
                    refused[into] = refused.get(into, 0) + got.refused
                    wall_ns[into] = wall_ns.get(into, 0) + got.wall_ns
    finally:
        if links is not None:
            links.stop()
        delete_keys_containing(cluster.node_urls, prefix, kind_of=cluster.kind_of)
        for other in lock_clusters.values():
            delete_keys_containing(other.node_urls, prefix, kind_of=other.kind_of)
    rows = {
        name: _row(name, samples[name], refused[name], wall_ns[name], library[name])
        for name in [*samples]
        if name not in floors
    }
    for floor in floors:
        # The floor row: the floor timed beside the row where it came out least (the least a lock can
        # cost here); each row's own floor is in its ``floor_p50_us``.
        beside = {name: rows[f"{floor}@{name}"] for name in measured}
        lowest = min(beside, key=lambda name: beside[name].p50_us)
        rows[floor] = replace(beside[lowest], backend=floor, beside=lowest)
        if floor == FLOOR:
            for name in measured:
                if name in rows:
                    rows[name] = replace(rows[name], floor_p50_us=beside[name].p50_us)
    return [rows[name] for name in names]


def _servers(name: str) -> str:
    """The kind of lock servers ``name`` declares (its traits' ``servers``: the Redis protocol when it says none)."""
    return traits_of(load_backend(name, check_viable=False)).servers


def lock_servers_needed(backends: Sequence[str], *, cluster: Cluster) -> list[str]:
    """The kinds of lock servers ``backends`` need that ``cluster``'s lock nodes are not (each once):
    the bench starts a cluster of each beside it (etcd members for the etcd backends)."""
    needed = dict.fromkeys(map(_servers, backends))
    return [kind for kind in needed if not cluster.node_urls or not get_kind(kind).owns(cluster.node_urls[0])]


def _row(name: str, samples_ns: list[int], refused: int, wall_ns: int, library_ns: list[int] | None = None) -> BenchRow:
    samples_us = [ns / 1000 for ns in samples_ns]
    split = bool(library_ns) and len(library_ns or []) == len(samples_ns)
    library_us = [ns / 1000 for ns in library_ns or []] if split else []
    hop_us = [cycle - lib for cycle, lib in zip(samples_us, library_us, strict=True)] if split else []
    return BenchRow(
        library_p50_us=percentile(library_us, 50) if split else math.nan,
        hop_p50_us=percentile(hop_us, 50) if split else math.nan,
        backend=name,
        iterations=len(samples_us),
        refused=refused,
        p50_us=percentile(samples_us, 50),
        p99_us=percentile(samples_us, 99),
        ops_per_s=len(samples_us) / (wall_ns / 1e9) if wall_ns > 0 else math.nan,
    )


def _run_worker(job: _Job) -> dict[str, _Measured]:
    """One block of one backend in a fresh process, with the floors timed before each of its cycles:
    what was measured, by row (the floors', and the backend's under its row name)."""
    parent_end, child_end = SPAWN.Pipe(duplex=False)
    timeout_s = START_TIMEOUT_S + (job.iterations + job.warmup) * (1 + len(job.floors)) * _MAX_CYCLE_S
    proc = start_worker_process(target=bench_worker_main, args=(job, child_end))
    try:
        child_end.close()
        if not parent_end.poll(timeout_s):
            raise TrialError(f"bench of {job.backend!r} did not finish within {timeout_s:.0f} s; worker stopped")
        try:
            message = parent_end.recv()
        except EOFError:
            raise TrialError(f"bench of {job.backend!r}: the worker exited without reporting") from None
    finally:
        reap_group(proc)  # the worker and any helper process of its backend
        parent_end.close()
    if message[0] != "ok":
        raise TrialError(f"bench of {job.backend!r} failed: {message[1]}")
    return message[1]


def bench_worker_main(job: _Job, conn: Connection) -> None:
    """Process entry point: send ``("ok", {row: _Measured})`` or ``("error", message)``.

    Each iteration times every floor's cycle, then the backend's (``job.backend`` FLOOR: the floors
    alone), one after another on this one thread."""
    die_with_parent()
    try:
        rows: dict[str, _Cycle] = {}
        closes: list[Callable[[], None]] = []
        try:
            for floor in job.floors:
                rows[floor] = _floor_cycle(job, fanout=floor == FANOUT_FLOOR)
                closes.append(rows[floor].close)
            if job.backend != FLOOR:
                rows[job.row] = _backend_cycle(job)
                closes.append(rows[job.row].close)
            for _ in range(job.warmup):
                for cycle in rows.values():
                    cycle.run()
            for cycle in rows.values():
                cycle.library()  # the warm-up's library time is not measured
            got = {row: _Measured(samples_ns=[], refused=0, wall_ns=0, library_ns=[]) for row in rows}
            timed = [(cycle, got[row]) for row, cycle in rows.items()]
            clock = time.perf_counter_ns
            for _ in range(job.iterations):
                for cycle, into in timed:
                    t0 = clock()
                    acquired = cycle.run()
                    t1 = clock()
                    spent = cycle.library()
                    into.wall_ns += t1 - t0
                    if acquired:
                        into.samples_ns.append(t1 - t0)
                        if spent is not None:
                            into.library_ns.append(spent)
                    else:
                        into.refused += 1
        finally:
            for close in reversed(closes):
                with contextlib.suppress(Exception):  # a close that fails must not hide the figures
                    close()
        send(conn, ("ok", got))
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent as data
        send(conn, ("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


@dataclass(frozen=True)
class _Cycle:
    """One row's cycle: ``run`` (True: acquired and released), ``close``, and ``library`` (the ns an
    external client reported inside its library since the last call; None for other backends)."""

    run: Callable[[], bool]
    close: Callable[[], None]
    library: Callable[[], int | None]


def _backend_cycle(job: _Job) -> _Cycle:
    backend = load_backend(job.backend)(config=job.config)
    take = getattr(backend, "take_library_ns", None)  # an external client reports its library's time

    def cycle() -> bool:
        lease = backend.acquire(key=job.key, ttl_ms=job.ttl_ms)
        if not lease:
            return False
        with contextlib.suppress(ReleaseFailed):  # the unlock got no answer: the cycle still ran
            backend.release(lease)
        return True

    return _Cycle(cycle, backend.close, take if callable(take) else _no_library)


def _no_library() -> None:
    return None


def _floor_cycle(job: _Job, *, fanout: bool = False) -> _Cycle:
    """SET NX PX + EVALSHA release over the direct path, on node 0 (``single``'s commands and path) or,
    with ``fanout``, on every lock node at once (``redlock``'s): no lease, no clock reads, no quorum,
    no error translation. Its key is the job's with the floor's name after it."""
    config = job.floor_config or job.config
    key, ttl_ms = f"{job.key}:{FANOUT_FLOOR if fanout else FLOOR}", job.ttl_ms
    if fanout:
        return _fanout_floor_cycle(config, key=key, ttl_ms=ttl_ms)
    client = connect(config.node_urls[0], timeout_s=config.request_timeout_s)
    release = client.register_script(RELEASE_SCRIPT)  # its sha; loaded by the first EVALSHA's NOSCRIPT
    direct = DirectCommands(client)

    def cycle() -> bool:
        token = secrets.token_hex(16)
        if direct.call("SET", key, token, "NX", "PX", ttl_ms) != b"OK":
            return False
        direct.script(release, [key], [token])
        return True

    def close() -> None:
        direct.close()
        client.close()

    return _Cycle(cycle, close, _no_library)


def _fanout_floor_cycle(config: BackendConfig, *, key: str, ttl_ms: int) -> _Cycle:
    """Redlock's two fan-outs (backends/redlock.py: the same nodes, node timeout and bytes), and nothing else.
    The release script is loaded first, so every EVALSHA finds it (Redlock's NOSCRIPT detour is for a
    node restarted empty, which a bench does not do)."""
    urls = lock_node_urls(config)
    nodes = [Node(url, timeout_s=config.request_timeout_s) for url in urls]
    for node in nodes:
        node.try_connect()  # as Redlock's constructor does
    timeout_s = Redlock.node_timeout_for(ttl_ms=ttl_ms, request_timeout_s=config.request_timeout_s)
    for reply, _ in fan_out(nodes, ("SCRIPT", "LOAD", RELEASE_SCRIPT), timeout_s=config.request_timeout_s):
        if reply != RELEASE_SHA.encode():
            raise TrialError(f"the fan-out floor could not load the release script on every lock node: {reply!r}")

    def cycle() -> bool:
        token = secrets.token_hex(16)
        replies = fan_out(nodes, ("SET", key, token, "NX", "PX", ttl_ms), timeout_s=timeout_s)
        granted = all(reply == b"OK" for reply, _ in replies)
        fan_out(nodes, ("EVALSHA", RELEASE_SHA, 1, key, token), timeout_s=timeout_s)
        return granted

    def close() -> None:
        for node in nodes:
            node.discard()

    return _Cycle(cycle, close, _no_library)


def _num(value: float, fmt: str) -> str:
    return "n/a" if math.isnan(value) else format(value, fmt)


def _ratio(value: float, base: float) -> str:
    if math.isnan(value) or math.isnan(base) or base <= 0:
        return "n/a"
    return f"{value / base:.2f}"


def render_bench(rows: Sequence[BenchRow], *, fmt: str = "github") -> str:
    """The bench rows as a table in one of :data:`lockcompare.render.table.FORMATS`.

    ``x single`` is each p50 divided by the ``single`` row's p50; without a ``single`` row the
    column divides by ``floor`` and is headed ``x floor``. ``x pottery`` appears when a ``pottery``
    row is present. ``floor beside µs`` is, for a lock row, the p50 of the ``floor`` cycles timed in
    its own process, between its own cycles, and for a floor row the row it was timed beside. All
    ratios compare rows of the same run.
    """
    check_format(fmt)
    if not rows:
        return "(no rows)"
    by_name = {row.backend: row for row in rows}
    base_name = "single" if "single" in by_name else FLOOR
    base = by_name[base_name].p50_us if base_name in by_name else math.nan
    pottery = by_name["pottery"].p50_us if "pottery" in by_name else None
    headers = ["backend", "cycles", "refused", "p50 µs", "p99 µs", "ops/s", f"x {base_name}"]
    if pottery is not None:
        headers.append("x pottery")
    beside = any(not math.isnan(row.floor_p50_us) or row.beside for row in rows)
    if beside:
        headers.append("floor beside µs")
    split = any(not math.isnan(row.library_p50_us) for row in rows)
    if split:
        headers += ["library p50 µs", "hop p50 µs"]
    lines = []
    for row in rows:
        line = [
            row.backend,
            str(row.iterations),
            str(row.refused),
            _num(row.p50_us, ".0f"),
            _num(row.p99_us, ".0f"),
            _num(row.ops_per_s, ".0f"),
            _ratio(row.p50_us, base),
        ]
        if pottery is not None:
            line.append(_ratio(row.p50_us, pottery))
        if beside:
            line.append(f"({row.beside})" if row.beside else _num(row.floor_p50_us, ".0f"))
        if split:
            line += [_num(row.library_p50_us, ".0f"), _num(row.hop_p50_us, ".0f")]
        lines.append(line)
    return format_table(headers, lines, fmt=fmt)
