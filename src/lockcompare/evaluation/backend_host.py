"""A backend under test, run in a child process so that every call has a deadline that holds.

The conformance battery must survive a backend that hangs (a blocking socket without a timeout, a
lock taken twice, an infinite retry loop). A thread with ``join(timeout)`` would report the hang but
leave the thread running, holding its sockets and possibly the GIL, until pytest exits — and a
thread stuck in C code cannot be interrupted at all. So the backend lives in one spawned child
process (the ``host``) that the runner talks to over a pipe: a call that misses its deadline gets
the host SIGKILLed and reaped at once, and nothing of the backend is left running. The host is
started again, lazily, for the next test. A spawn costs ~0.3 s, so one host serves many calls and
many backend instances (one instance per simulated client).

The host leads a process group of its own, and every helper process its backend starts (a lock
client in another language, driven over a pipe) inherits it: :meth:`BackendHost.frozen` stops the
whole client, as a stop-the-world pause of a worker does, and a kill ends the whole group.

Every outcome is reported as data, so a caller can tell a backend's *refusal* (a
:class:`~lockcompare.backends.Refusal`) from a backend that *raised* (``acquire raised X``), that
timed out, or that returned something that is not a Lease or a Refusal.

Example::

    >>> host = BackendHost(spec="single", call_timeout_s=5.0)            # doctest: +SKIP
    >>> lock = host.new_instance(config=BackendConfig(node_urls=urls))   # doctest: +SKIP
    >>> lock.acquire(key="demo", ttl_ms=1000)                            # doctest: +SKIP
    Lease(key='demo', owner='9f2c...', valid_until_ns=..., fencing_token=None)
    >>> host.close()                                                     # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from lockcompare.backends import (
    BackendConfig,
    Lease,
    LockBackend,
    Refusal,
    load_backend,
)
from lockcompare.backends.base import TRAIT_DEFAULTS, Traits, declared_traits, traits_of
from lockcompare.errors import (
    BackendCallFailed,
    BackendCallRaised,
    BackendCallTimedOut,
    BackendHostDied,
    BackendLoadError,
    LockcompareError,
    ReleaseFailed,
)
from lockcompare.evaluation.battery_log import BatteryLog
from lockcompare.infra import cgroup
from lockcompare.infra.lifecycle import SPAWN, die_with_parent, kill_and_reap_group, reap_group
from lockcompare.infra.messages import send
from lockcompare.infra.procgroup import GroupView, describe_escaped

#: Starting the host: spawning an interpreter and importing lockcompare (~0.3 s here).
HOST_START_TIMEOUT_S = 60.0
#: Importing the plug-in in a fresh host ("load"): start-up too, not one of the backend's calls, so it
#: gets a start-up allowance (the deadline when it exceeds the backend's own), as a worker's construct
#: does (runner/watch.py ``CONSTRUCT_TIMEOUT_S``). A host restarted after a kill on a busy machine took
#: longer than a 0.5 s call deadline to import its plug-in (CI); a plug-in that hangs at import is
#: still cut, at this bound.
LOAD_TIMEOUT_S = 20.0


#: The defaults a backend that leaves a trait out gets: the traits record's own (backends/base.py).
_DEFAULT = Traits()


@dataclass(frozen=True, kw_only=True)
class Claims:
    """What a backend class says about itself, as the host read it: the claims of its
    :class:`~lockcompare.backends.base.Traits` the battery checks, each a plain value *as declared*
    (so that ``declares_the_protocol`` can report a wrong one), with the traits' defaults.
    """

    summary: object
    exclusive: object
    issues_fencing_tokens: object
    #: A multi-node design that promises to keep granting leases while a minority of its nodes is down.
    survives_minority_loss: object = _DEFAULT.survives_minority_loss
    #: Which servers the lock nodes are, the shortest TTL the backend can grant, and how late after
    #: its TTL the lock service may end a lease (see backends/base.py).
    servers: object = _DEFAULT.servers
    min_ttl_ms: object = _DEFAULT.min_ttl_ms
    expiry_lag_ms: object = _DEFAULT.expiry_lag_ms
    #: False for a lock without a lease deadline (``pg-advisory``: held while its session lives):
    #: the TTL properties are then NOT CLAIMED — once the battery has checked the claim itself.
    has_ttl: object = _DEFAULT.has_ttl
    #: A renewing lock (a watchdog extends its lease while the holder lives): it has the renewal
    #: hooks ``drain_renewals`` / ``stop_renewal``, or says ``renews = True``. Checked by the battery.
    renews: object = _DEFAULT.renews
    #: A lock whose client checks its lease before writing: it has a ``before_write(lease)`` hook.
    #: Checked by the battery: after its lock went to another client, the hook must say so.
    checks_lease: object = _DEFAULT.checks_lease


@dataclass(frozen=True, kw_only=True)
class Timed:
    """A call's result and when it ran in the host (``time.monotonic_ns()``: one clock for all processes)."""

    value: Any
    t0_ns: int
    t1_ns: int
    #: Of ``t1_ns - t0_ns``, the time inside the lock's library, when the backend reports it (an
    #: external client's ``library_ns``): the rest is the protocol's hop to the client and back,
    #: which the harness spends, not the library. None: the whole call is the library's.
    library_ns: int | None = None


# --- the child side ------------------------------------------------------------------------------


def _serve(conn: Connection) -> None:
    """The host's loop: one request in, one reply out, until the pipe closes."""
    die_with_parent()
    # The client library of every built-in, imported with the interpreter, before any deadline runs:
    # lockcompare itself no longer loads it at import (infra/redis/client.py imports it on connect), and
    # a plug-in's "load" call has the backend's deadline (measured: ~0.5 s to import redis under load).
    import redis  # noqa: F401

    cls: type[LockBackend] | None = None
    instances: dict[int, LockBackend] = {}
    ids = itertools.count()
    send(conn, ("ready", None, 0, 0, None))  # the interpreter is up and lockcompare imported
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            return
        t0 = time.monotonic_ns()
        library_ns: int | None = None
        try:
            if op == "load":
                cls = load_backend(args["spec"])
                value: Any = claims_of(cls)
            elif op == "new":
                assert cls is not None, "load first"
                handle = next(ids)
                instances[handle] = cls(config=args["config"])
                value = handle
            elif op == "acquire":
                instance = instances[args["handle"]]
                library = _library_clock(instance)
                value = _as_outcome(instance.acquire(key=args["key"], ttl_ms=args["ttl_ms"]))
                library_ns = library()
            elif op == "release":
                try:
                    value = _as_bool(instances[args["handle"]].release(args["lease"]))
                except ReleaseFailed:  # the unlock's request failed: for the battery, a release that did not happen
                    value = False
            elif op == "before_write":  # the lease check of a backend that has one (claims.checks_lease)
                value = _as_outcome(instances[args["handle"]].before_write(args["lease"]))  # type: ignore[attr-defined]
            elif op == "drain":  # what a renewing client reports of itself (the history's renew events)
                drain = getattr(instances[args["handle"]], "drain_renewals", None)
                value = [dict(r) for r in drain()] if drain is not None else []
            elif op == "close":
                instances.pop(args["handle"]).close()
                value = None
            else:
                raise ValueError(f"unknown host operation {op!r}")
            reply: tuple[str, Any, int, int, int | None] = ("ok", value, t0, time.monotonic_ns(), library_ns)
        except LockcompareError as exc:  # load_backend's own one-line errors keep their type
            reply = ("lockcompare-error", exc, t0, time.monotonic_ns(), None)
        except BaseException as exc:  # noqa: BLE001 - the backend's failure is the data we report
            reply = ("raised", f"{type(exc).__name__}: {exc}", t0, time.monotonic_ns(), None)
        try:
            send(conn, reply)
        except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable exception: report it as text
            send(
                conn,
                ("raised", f"{type(exc).__name__} while reporting the result: {exc}", t0, time.monotonic_ns(), None),
            )


def _library_clock(instance: object) -> Callable[[], int | None]:
    """For a backend that reports its library's time (an external client's ``take_library_ns``): a
    function that returns the library's time since this call; else one that returns None."""
    take = getattr(instance, "take_library_ns", None)
    if not callable(take):
        return lambda: None
    take()  # what earlier calls spent (release, extend...) is not this call's
    return take


def claims_of(cls: type) -> Claims:
    """The battery's view of ``cls``'s traits: its :class:`Traits` when they are well declared, else
    what it declares as it is (the battery then reports the wrong declaration, not a load error)."""

    def plain(value: object) -> object:  # only plain values cross the pipe
        return value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)

    declared = declared_traits(cls)
    try:
        said = vars(traits_of(cls)) | declared
    except BackendLoadError:
        renewal_hooks = _has_hook(cls, "drain_renewals") or _has_hook(cls, "stop_renewal")
        said = TRAIT_DEFAULTS | {"renews": renewal_hooks} | declared
    return Claims(
        **{name: plain(declared.get(name)) for name in ("summary", "exclusive", "issues_fencing_tokens")},
        **{name: plain(said[name]) for name in ("survives_minority_loss", "servers", "expiry_lag_ms", "has_ttl")},
        min_ttl_ms=plain(said["min_ttl_ms"] or _shortest_ttl_ms(said["check_ttl"])),
        renews=plain(said["renews"]),
        checks_lease=_has_hook(cls, "before_write"),
    )


#: TTLs tried, shortest first, on a backend that can refuse a TTL (``check_ttl``) but declares no ``min_ttl_ms``.
_TTL_LADDER_MS = (150, 200, 250, 500, 1000, 2000, 3000, 5000, 10000)


def _shortest_ttl_ms(check_ttl: object) -> int:
    """The shortest TTL of :data:`_TTL_LADDER_MS` the backend's ``check_ttl`` accepts (0: no check),
    so that the battery's short leases are ones it can express (python-redis-lock: whole seconds)."""
    if not callable(check_ttl):
        return 0
    for ttl_ms in _TTL_LADDER_MS:
        try:
            check_ttl(ttl_ms=ttl_ms)
        except Exception:  # noqa: BLE001 - refused: try a longer one
            continue
        return ttl_ms
    return 0


def _has_hook(cls: type, name: str) -> bool:
    return callable(getattr(cls, name, None))


class _BadReturn(str):
    """What a call returned when it was neither of the allowed types (its repr, for the message)."""


def _as_outcome(outcome: object) -> Lease | Refusal | _BadReturn:
    """A Lease or a Refusal as our own plain dataclasses (a subclass may not unpickle in the parent)."""
    if isinstance(outcome, Lease) and (problem := outcome.problem()) is not None:
        return _BadReturn(f"a Lease whose {problem}")
    if isinstance(outcome, Lease):
        return Lease(
            key=outcome.key,
            owner=outcome.owner,
            valid_until_ns=outcome.valid_until_ns,
            fencing_token=outcome.fencing_token,
        )
    if isinstance(outcome, Refusal):
        return Refusal(str(outcome.reason), str(outcome.detail))
    return _BadReturn(repr(outcome)[:200])


def _as_bool(result: object) -> bool | _BadReturn:
    return result if isinstance(result, bool) else _BadReturn(repr(result)[:200])


# --- the runner side -----------------------------------------------------------------------------


class BackendHost:
    """One child process hosting instances of the backend ``spec``; every call has ``call_timeout_s``.

    Started lazily by the first call; after a timeout it is killed, and the next :meth:`new_instance`
    starts a fresh one (instances of the killed host are gone: their calls raise
    :class:`BackendHostDied`). :meth:`close` kills and reaps it; safe to call twice.
    """

    def __init__(self, *, spec: str, call_timeout_s: float) -> None:
        if not call_timeout_s > 0:
            raise ValueError(f"call_timeout_s must be > 0, got {call_timeout_s}")
        self.spec = spec
        self.call_timeout_s = call_timeout_s
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._claims: Claims | None = None
        self._generation = 0  # which process an instance belongs to

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def claims(self) -> Claims:
        """The backend class's claims (loading it in the host first if needed)."""
        self._ensure_started()
        assert self._claims is not None
        return self._claims

    def new_instance(self, *, config: BackendConfig, log: BatteryLog | None = None, worker: int = 0) -> RemoteBackend:
        """Construct one backend instance in the host (the ``construct`` call has the deadline too);
        ``log``: where its calls are recorded, as worker ``worker`` (a construct that fails too)."""
        t0 = time.monotonic_ns()
        try:
            self._ensure_started()
            handle = self.call("new", what="construct", config=config).value
        except BackendCallFailed as exc:
            if log is not None:
                log.add("error", worker=worker, t0=t0, t1=time.monotonic_ns(), message=str(exc))
            raise
        return RemoteBackend(host=self, handle=handle, generation=self._generation, log=log, worker=worker)

    def call(self, op: str, *, what: str, timeout_s: float | None = None, **args: Any) -> Timed:
        """Run one operation in the host; raise a :class:`BackendCallFailed` unless it returned
        within ``timeout_s`` (default: the backend's ``call_timeout_s``)."""
        if self._conn is None:
            raise BackendHostDied(f"{what}: the backend's process is gone (killed after an earlier timeout)")
        conn = self._conn
        deadline_s = self.call_timeout_s if timeout_s is None else timeout_s
        try:
            send(conn, (op, args))
            answered = conn.poll(deadline_s)
        except (OSError, EOFError):
            self._kill()
            raise BackendHostDied(f"{what}: the backend's process died") from None
        if not answered:
            self._kill()
            raise BackendCallTimedOut(
                f"{what} did not return within {deadline_s:g} s (the backend's process was killed)"
            )
        try:
            status, value, t0, t1, library_ns = conn.recv()
        except (OSError, EOFError):
            self._kill()
            raise BackendHostDied(f"{what}: the backend's process died (exit code {self._exitcode()})") from None
        if status == "lockcompare-error":
            raise value
        if status == "raised":
            raise BackendCallRaised(f"{what} raised {value}")
        if isinstance(value, _BadReturn):
            expected = "a bool" if op == "release" else "a Lease or a Refusal"
            raise BackendCallFailed(f"{what} returned {value}, not {expected}")
        return Timed(value=value, t0_ns=t0, t1_ns=t1, library_ns=library_ns)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[list[str]]:
        """Stop the host's whole client for the block — its cgroup frozen (infra/cgroup.py), else
        its process group SIGSTOPped — and continue it after, whatever happens. Yields the helper
        processes the freeze did not reach (``pid N (command)``: they left the process group, or
        the cgroup). Make no call into the host inside the block."""
        pid = self.pid
        if pid is None or self._conn is None:
            raise BackendHostDied("freeze: the backend's process is not running")
        view = GroupView(leaders=[pid], cgroup_members=cgroup.cgroup_members)
        view.refresh(force=True)
        escaped = [describe_escaped(p) for _, p in view.newly_escaped()]
        cgroup.stop_client(pid)
        try:
            yield escaped
        finally:
            with contextlib.suppress(ProcessLookupError):
                cgroup.continue_client(pid)

    def is_current(self, generation: int) -> bool:
        return generation == self._generation and self._conn is not None

    def close(self) -> None:
        """Stop the host: close the pipe (it exits by itself), SIGKILL it if it does not, reap it."""
        proc, conn = self._proc, self._conn
        self._proc, self._conn = None, None
        if conn is not None:
            conn.close()
        if proc is not None:
            reap_group(proc, timeout_s=2)  # helpers that outlive the host die with its group
            cgroup.release(proc.pid)  # and with its cgroup, those that left the group

    def _ensure_started(self) -> None:
        if self._conn is not None:
            return
        parent_end, child_end = SPAWN.Pipe(duplex=True)
        self._proc = cgroup.start_in_cgroup(target=_serve, args=(child_end,))
        child_end.close()
        self._conn = parent_end
        self._generation += 1
        try:
            # Starting an interpreter and importing the plug-in are start-up, with allowances of
            # their own; the backend's deadline is for its calls (construct, acquire, release, ...).
            if not parent_end.poll(HOST_START_TIMEOUT_S):
                raise BackendHostDied(f"the backend's process did not start within {HOST_START_TIMEOUT_S:g} s")
            parent_end.recv()
            load_timeout_s = max(self.call_timeout_s, LOAD_TIMEOUT_S)
            claims = self.call("load", what=f"loading {self.spec}", timeout_s=load_timeout_s, spec=self.spec).value
        except (OSError, EOFError):
            self._kill()
            raise BackendHostDied("the backend's process died while starting") from None
        except BaseException:
            self._kill()
            raise
        self._claims = claims

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc, self._conn = None, None
        if proc is not None:
            kill_and_reap_group(proc)
            cgroup.release(proc.pid)
        if conn is not None:
            conn.close()

    def _exitcode(self) -> int | None:
        return self._proc.exitcode if self._proc is not None else None


class RemoteBackend:
    """One backend instance living in a :class:`BackendHost`; the protocol's methods, with deadlines.

    With a ``log`` (evaluation/battery_log.py), every call is recorded there as worker ``worker``:
    the check's history, read like a trial's."""

    def __init__(
        self, *, host: BackendHost, handle: int, generation: int, log: BatteryLog | None = None, worker: int = 0
    ) -> None:
        self._host = host
        self._handle = handle
        self._generation = generation
        self.closed = False
        self.log = log
        self.worker = worker
        self.round = -1  # counts its acquires: an acquire and the release of its lease share a round

    def acquire_timed(self, *, key: str, ttl_ms: int) -> Timed:
        self.round += 1
        timed = self._call("acquire", key=key, ttl_ms=ttl_ms)
        if self.log is not None:
            outcome = timed.value
            granted = isinstance(outcome, Lease)
            self._record("acquire", timed, ok=granted, attempts=1, ttl_ms=ttl_ms,
                         refusals=None if granted else {outcome.reason: 1},
                         owner=outcome.owner if granted else None,
                         fence=outcome.fencing_token if granted else None,
                         valid_until=outcome.valid_until_ns if granted else None)  # fmt: skip
        return timed

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        return self.acquire_timed(key=key, ttl_ms=ttl_ms).value

    def release(self, lease: Lease) -> bool:
        timed = self._call("release", lease=lease)
        self._record("release", timed, released=timed.value, owner=lease.owner)
        return bool(timed.value)

    def before_write_timed(self, lease: Lease) -> Timed:
        """The backend's ``before_write(lease)`` hook (only for a backend that has one)."""
        timed = self._call("before_write", lease=lease)
        answer = timed.value
        if isinstance(answer, Lease):
            self._record("lease", timed, ok=True, valid_until=answer.valid_until_ns)
        else:
            self._record("lease", timed, ok=False, reason=answer.reason)
        return timed

    def close(self) -> None:
        """Close the instance in the host; a no-op if the host is gone (its process took it along)."""
        if self.closed:
            return
        self.closed = True
        if self._host.is_current(self._generation):
            self._drain()
            self._host.call("close", what="close", handle=self._handle)

    def _call(self, op: str, **args: Any) -> Timed:
        if not self._host.is_current(self._generation):
            error = BackendHostDied(f"{op}: this instance's process was killed after an earlier timeout")
            self._record_error(str(error))
            raise error
        t0 = time.monotonic_ns()
        try:
            timed = self._host.call(op, what=op, handle=self._handle, **args)
        except BackendCallFailed as exc:
            self._record_error(str(exc), t0=t0)
            raise
        self._drain()
        return timed

    def _drain(self) -> None:
        """Move what a renewing client reported of itself (its ``drain_renewals``) into the log."""
        if self.log is None or not self._host.is_current(self._generation):
            return
        try:
            records = self._host.call("drain", what="drain_renewals", handle=self._handle).value
        except BackendCallFailed as exc:
            self._record_error(str(exc))
            raise
        self.log.renewals(records, worker=self.worker, round_=max(self.round, 0))

    def _record(self, kind: str, timed: Timed, **fields: Any) -> None:
        if self.log is not None:
            self.log.add(kind, worker=self.worker, round_=max(self.round, 0), t0=timed.t0_ns, t1=timed.t1_ns,
                         **fields)  # fmt: skip

    def _record_error(self, message: str, *, t0: int | None = None) -> None:
        if self.log is not None:
            now = time.monotonic_ns()
            self.log.add("error", worker=self.worker, round_=max(self.round, 0), t0=now if t0 is None else t0,
                         t1=now, message=message)  # fmt: skip
