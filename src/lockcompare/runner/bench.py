"""Acquire + release latency of each backend: a benchmark, not a test.

Each backend runs alone, in its own worker process (``spawn``: a fresh interpreter, not a thread of
the caller, whose GIL would otherwise sit in every measurement), one backend after another, never
two at once. A worker does ``warmup`` untimed cycles, then ``iterations`` timed ones; a cycle is one
acquire and one release of the same key, sequentially, each timed with ``perf_counter_ns``.

Rows ``<backend>-via-proxy`` (``proxied=[...]``) measure the same backend with every lock node
reached through a :class:`lockcompare.infra.proxy.LinkProxy` (one proxy process, no fault applied): the
difference to the direct row is what the proxy itself adds to each round trip, measured in the
same run, so link-fault experiments can say how much of a delay is the proxy's own.

The first row, ``floor``, is the least a correct lock can cost: a bare ``SET key token NX PX`` plus
the compare-and-delete release script (EVALSHA) on lock node 0, over one connection, with no
backend object in between — sent the fastest way the harness has, the direct path the workers' hot
calls take (:class:`lockcompare.backends.redis_direct.DirectCommands`, the path ``single`` uses),
so no lock row can beat it by taking a faster path than the floor's (issue 54: through redis-py's
per-call layers the floor measured 212-238 µs against ``single``'s 121-153). Every other row is
read against it or against ``single``.

What the numbers are, and are not:

- ``p50_us`` / ``p99_us``: percentiles of the timed cycles that acquired (microseconds).
- ``ops_per_s``: those cycles divided by the wall time of the whole timed loop.
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
from dataclasses import dataclass
from multiprocessing.connection import Connection

from lockcompare.analysis.stats import percentile
from lockcompare.backends import BackendConfig, load_backend, traits_of
from lockcompare.backends.redis_direct import DirectCommands
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


@dataclass(frozen=True, kw_only=True)
class _Job:
    """What one bench worker process is told to do (picklable)."""

    backend: str  # a backend name or spec, or FLOOR
    config: BackendConfig
    key: str
    iterations: int
    warmup: int
    ttl_ms: int


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
    """Measure acquire + release latency: the ``floor`` row first, then one row per backend, in order.

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
    names = [FLOOR]
    for name in dict.fromkeys([*backends, *proxied]):  # each backend once, in the order given
        if name in backends:
            names.append(name)
        if name in proxied:
            names.append(name + VIA_PROXY)
    samples: dict[str, list[int]] = {name: [] for name in names}
    library: dict[str, list[int]] = {name: [] for name in names}
    refused = dict.fromkeys(names, 0)
    wall_ns = dict.fromkeys(names, 0)
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
            order = names[block % len(names) :] + names[: block % len(names)]
            for name in order:
                via_proxy = name.endswith(VIA_PROXY) and links is not None
                job = _Job(
                    backend=name.removesuffix(VIA_PROXY) if via_proxy else name,
                    config=proxied_config if via_proxy else configs.get(name, config),
                    key=f"{prefix}:{names.index(name)}",
                    iterations=iterations // blocks + (1 if block < iterations % blocks else 0),
                    warmup=warmup,
                    ttl_ms=ttl_ms,
                )
                block_samples, block_refused, block_wall, block_library = _run_worker(job)
                samples[name].extend(block_samples)
                library[name].extend(block_library)
                refused[name] += block_refused
                wall_ns[name] += block_wall
    finally:
        if links is not None:
            links.stop()
        delete_keys_containing(cluster.node_urls, prefix, kind_of=cluster.kind_of)
        for other in lock_clusters.values():
            delete_keys_containing(other.node_urls, prefix, kind_of=other.kind_of)
    return [_row(name, samples[name], refused[name], wall_ns[name], library[name]) for name in names]


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


def _run_worker(job: _Job) -> tuple[list[int], int, int, list[int]]:
    """One block of one backend in a fresh process: (cycle times in ns, refusals, wall ns, and per
    cycle the ns an external client reported inside its library: empty for other backends)."""
    parent_end, child_end = SPAWN.Pipe(duplex=False)
    timeout_s = START_TIMEOUT_S + (job.iterations + job.warmup) * _MAX_CYCLE_S
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
    _, samples_ns, refused, wall_ns, library_ns = message
    return samples_ns, refused, wall_ns, library_ns


def bench_worker_main(job: _Job, conn: Connection) -> None:
    """Process entry point: send ``("ok", samples_ns, refused, wall_ns, library_ns)`` or ``("error", message)``."""
    die_with_parent()
    try:
        cycle, close, library = _floor_cycle(job) if job.backend == FLOOR else _backend_cycle(job)
        try:
            for _ in range(job.warmup):
                cycle()
            library()  # the warm-up's library time is not measured
            samples_ns: list[int] = []
            library_ns: list[int] = []
            refused = 0
            clock = time.perf_counter_ns
            wall_start = clock()
            for _ in range(job.iterations):
                t0 = clock()
                acquired = cycle()
                t1 = clock()
                spent = library()
                if acquired:
                    samples_ns.append(t1 - t0)
                    if spent is not None:
                        library_ns.append(spent)
                else:
                    refused += 1
            wall_ns = clock() - wall_start
        finally:
            close()
        send(conn, ("ok", samples_ns, refused, wall_ns, library_ns))
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent as data
        send(conn, ("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _backend_cycle(job: _Job) -> tuple[Callable[[], bool], Callable[[], None], Callable[[], int | None]]:
    backend = load_backend(job.backend)(config=job.config)
    take = getattr(backend, "take_library_ns", None)  # an external client reports its library's time

    def cycle() -> bool:
        lease = backend.acquire(key=job.key, ttl_ms=job.ttl_ms)
        if not lease:
            return False
        with contextlib.suppress(ReleaseFailed):  # the unlock got no answer: the cycle still ran
            backend.release(lease)
        return True

    return cycle, backend.close, (take if callable(take) else _no_library)


def _no_library() -> None:
    return None


def _floor_cycle(job: _Job) -> tuple[Callable[[], bool], Callable[[], None], Callable[[], int | None]]:
    """SET NX PX + EVALSHA release on node 0 over the direct path: ``single``'s commands and connection
    path without its backend object (no lease, no clock reads, no error translation)."""
    client = connect(job.config.node_urls[0], timeout_s=job.config.request_timeout_s)
    release = client.register_script(RELEASE_SCRIPT)  # its sha; loaded by the first EVALSHA's NOSCRIPT
    direct = DirectCommands(client)
    key, ttl_ms = job.key, job.ttl_ms

    def cycle() -> bool:
        token = secrets.token_hex(16)
        if direct.call("SET", key, token, "NX", "PX", ttl_ms) != b"OK":
            return False
        direct.script(release, [key], [token])
        return True

    def close() -> None:
        direct.close()
        client.close()

    return cycle, close, _no_library


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
    row is present. All ratios compare rows of the same run.
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
        if split:
            line += [_num(row.library_p50_us, ".0f"), _num(row.hop_p50_us, ".0f")]
        lines.append(line)
    return format_table(headers, lines, fmt=fmt)
