"""Aimed when it lands: what a lease-aimed step reads ahead, and what it confirms at the moment it acts.

A step aimed at a lease (``holders:K``, ``others:K``, ``worker=holder``, ``holder-member``, a
session-kill) is triggered by an acquire a worker reports, and aimed at *that* lease. What it
needs to know splits in two:

* **where the lease is** — which nodes hold it (a read of the lock key on every node), which member
  its holder's client is attached to (the servers' roles and the worker's sockets). That is read
  *ahead*: the read starts, on a thread of its own, the moment the acquire is reported, while the
  step waits for its planned moment. A read is never started between the planned moment and the
  action (it made ``holders:1`` steps land 100-900 ms late on a loaded machine); if the read ahead
  has not finished by then, the step waits for what is left of it, and the event says how long
  (``read_wait_ms``).
* **whether the lease is still held** — confirmed at the moment the fault acts from the worker's own
  lease slot in shared memory (faults/leases.py: which round it holds, until when, when it began
  releasing), and checked again once the fault has acted: ``lease_held`` says whether the lease was
  still held at the moment the fault acted.

A lease that had ended is not struck: the step strikes the lease held now (``retargeted``) when the
servers were read after that lease was granted, else nothing (``missed``). A session kill asks
:meth:`Aim.session_lease` at kill time whether the session it is about to end is a worker's current
lease (infra/kinds.py ``SessionKind``): it ends no session that no worker holds the lock with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lockcompare.analysis.history import now_ns
from lockcompare.faults.leases import LeaseSlot
from lockcompare.faults.targets import Resolution


@dataclass(frozen=True)
class Lease:
    """A lease a worker reported: its owner token, whose, which round, when the report arrived."""

    owner: str
    worker: int
    round: int
    reported_ns: int
    session: str | None = None
    #: The lock nodes that granted it, where the backend says (Redlock): they hold it until its
    #: deadline, so a step aimed at its nodes needs no read.
    granted_by: tuple[int, ...] | None = None


@dataclass
class _Read:
    started_ns: int  # when it was asked for
    future: Future[Any] | None = None
    ran_ns: int | None = None  # when it actually began (it may queue behind another)
    done_ns: int | None = None  # when it ended (a read still running as a fault acts read some nodes after it)


@dataclass
class Fetched:
    """A read ahead, as a step uses it: what it found, when it started, how long the step waited for it."""

    value: Any
    started_ns: int
    wait_ms: float


@dataclass
class SessionGuard:
    """Asked by a session kill right before it ends a session (``guard(session) -> bool``): is it a
    worker's current lease? Remembers the last lease it confirmed and when (the moment of the kill)."""

    aim: Aim
    #: The lease the step is aimed at: the one a session is taken for when no reported lease names
    #: sessions (pg-lease: its row records the session, its lease does not).
    fallback: Lease | None = None
    lease: Lease | None = None
    confirmed_ns: int | None = None
    asked: list[str] = field(default_factory=list)

    def __call__(self, session: object) -> bool:
        self.asked.append(str(session))
        lease = self.aim.session_lease(session)
        if lease is None and not self.aim.names_sessions():
            lease = self.fallback
        held = self.aim.held_lease_of(lease.worker) if lease is not None else None
        if lease is None or held is None:
            return False
        if held != lease.round:
            # A later lease of the same worker (its session's), granted but not yet reported to the
            # runner, which was busy with this very step: held now all the same.
            lease = Lease(owner="", worker=lease.worker, round=held, reported_ns=now_ns(), session=lease.session)
        self.lease, self.confirmed_ns = lease, now_ns()
        return True


class Aim:
    """The leases the workers reported, their lease slots, and the reads made ahead of the steps."""

    def __init__(self) -> None:
        self.slots: Sequence[LeaseSlot] = ()
        self._by_owner: dict[str, Lease] = {}
        self._latest: dict[int, Lease] = {}
        self._reads: dict[object, list[_Read]] = {}
        self._pool: ThreadPoolExecutor | None = None

    # -- what the workers reported ------------------------------------------------------------

    def reported(self, lease: Lease) -> None:
        self._by_owner[lease.owner] = lease
        self._latest[lease.worker] = lease

    def lease_of(self, owner: str | None) -> Lease | None:
        return self._by_owner.get(owner) if owner else None

    def latest(self, worker: int) -> Lease | None:
        return self._latest.get(worker)

    def owners(self) -> dict[str, int]:
        return {owner: lease.worker for owner, lease in self._by_owner.items()}

    # -- confirmed at the moment of acting ----------------------------------------------------

    def can_confirm(self) -> bool:
        return bool(self.slots)

    def holds(self, lease: Lease) -> bool:
        """Does ``lease``'s worker hold it now (its slot: that round, not released, not past its deadline)?"""
        if lease.worker >= len(self.slots):
            return False
        now = self.slots[lease.worker].holding()
        return now is not None and now[0] == lease.round

    def held_lease_of(self, worker: int) -> int | None:
        """The round whose lease ``worker`` holds now (its slot), or None."""
        if worker >= len(self.slots):
            return None
        now = self.slots[worker].holding()
        return None if now is None else now[0]

    def current(self) -> Lease | None:
        """A lease some worker holds now (the lowest such worker's), as its slot says; None: none."""
        for worker, slot in enumerate(self.slots):
            now = slot.holding()
            latest = self._latest.get(worker)
            if now is not None and latest is not None and latest.round == now[0]:
                return latest
        return None

    def held_at(self, lease: Lease, t_ns: int) -> bool | None:
        """Was ``lease`` still held at ``t_ns`` (checked once the fault has acted)? None: unknown."""
        if lease.worker >= len(self.slots):
            return None
        return self.slots[lease.worker].of_round(lease.round).held_at(t_ns)

    def names_sessions(self) -> bool:
        """Does some reported lease name its server session (a reported session, or an owner token
        ``token.<session>.<znode>``)?"""
        return any(x.session is not None or x.owner.count(".") >= 2 for x in self._by_owner.values())

    def session_lease(self, session: object) -> Lease | None:
        """The latest reported lease of a server session: one whose reported session it is
        (PostgreSQL: a backend pid); whose owner token carries it (ZooKeeper locks: ``token.<session
        id in hex>.<znode>``); or whose owner token it starts (the identifier a holder's znode stores)."""
        key = str(session)

        def names(lease: Lease) -> bool:
            if lease.session is not None:
                return str(lease.session) == key
            parts = lease.owner.split(".")
            return lease.owner == key or lease.owner.startswith(key + ".") or (len(parts) > 2 and parts[1] == key)

        found = [x for x in self._by_owner.values() if names(x)]
        return max(found, key=lambda x: x.reported_ns) if found else None

    # -- what a fault hit ------------------------------------------------------------------------

    def lease_hit(self, lease: Lease, *, acted_ns: int) -> dict[str, Any]:
        """Was the lease the fault struck still held when it acted (the worker's slot, checked now)?
        A lease that ended meanwhile is ``raced``: which came first is not known, so it is not struck."""
        held = self.held_at(lease, acted_ns)
        return {"lease_held": held, **({} if held else {"aim": "raced"})}

    def session_hit(self, extra: dict[str, Any], *, guard: SessionGuard | None, aimed: Lease | None) -> dict[str, Any]:
        """Whose session a session-kill ended, and whether it was a current lease when it did.

        ``session_worker``: the worker whose lease the ended session was — the one the kill's
        ``guard`` confirmed at kill time (faults/aim.py), else found from ``session_owner`` (ZooKeeper:
        the identifier the holder stored, which starts its owner token) or the first of
        ``sessions_ended`` (PostgreSQL: a backend pid a lease reported as its session). ``aim``:
        ``retargeted`` when that was not the lease the step was aimed at; ``missed`` when the guard
        turned every session it was asked about down (the holder had begun releasing)."""
        ended = bool(extra.get("sessions_ended"))
        hit = guard.lease if guard is not None and guard.lease is not None else None
        if hit is None and ended:
            first = extra.get("session_owner") or extra["sessions_ended"][0]
            hit = self.session_lease(first)
        fields: dict[str, Any] = {"session_worker": hit.worker if hit is not None else None}
        if guard is not None and guard.asked and not ended:
            return fields | {"aim": "missed", "sessions_refused": guard.asked}
        if not ended:
            return fields
        if hit is None:
            return fields | {"lease_held": None}  # a session no reported lease names: not known to be the lock's
        acted = guard.confirmed_ns if guard is not None and guard.confirmed_ns is not None else now_ns()
        # A lease not yet reported has no owner token here: the event then names none (not the aimed one's).
        fields |= {
            "lease_worker": hit.worker,
            "lease_round": hit.round,
            "acted_ns": acted,
            "lease_owner": hit.owner or None,
        }
        if aimed is not None and hit.owner != aimed.owner:
            fields["aim"] = "retargeted"
        return fields | self.lease_hit(hit, acted_ns=acted)

    # -- read ahead ---------------------------------------------------------------------------

    def read_ahead(self, key: object, read: Callable[[], Any]) -> None:
        """Start ``read`` now, on the aim's own thread (one read at a time, in order)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fault-aim")
        entry = _Read(started_ns=now_ns())

        def run() -> Any:
            entry.ran_ns = now_ns()
            try:
                return read()
            finally:
                entry.done_ns = now_ns()

        entry.future = self._pool.submit(run)
        self._reads.setdefault(key, []).append(entry)
        del self._reads[key][:-2]  # the last two: one may still run while the newer is queued

    def evidence_since(self, key: object, since_ns: int, *, before_ns: int) -> Fetched | None:
        """After a fault acted at ``before_ns``: the newest read of ``key`` asked for since ``since_ns``
        (waited for now — the action is done), if it ran wholly before the action; None otherwise. What
        the nodes held as the fault struck, read ahead of it, recorded without delaying it. A read still
        running as the fault acted is no evidence: it read some nodes after the fault (a restarted node
        unreadable, or empty), not what they held as it struck."""
        reads = [r for r in self._reads.get(key, ()) if r.started_ns >= since_ns]
        if not reads:
            return None
        read = reads[-1]
        try:
            value = _future(read).result()
        except Exception:  # noqa: BLE001 - evidence only: a failed read is recorded as none
            return None
        if read.ran_ns is None or read.done_ns is None or read.done_ns > before_ns:
            return None
        return Fetched(value=value, started_ns=read.ran_ns, wait_ms=0.0)

    def read_since(self, key: object, since_ns: int, *, older_if_running: bool = False) -> Fetched | None:
        """The newest read of ``key`` started at or after ``since_ns``, waited for if still running —
        unless ``older_if_running`` and an older read of ``key`` has finished: then that one (a role
        read: who leads, the member a worker's client is attached to, seldom change between two of
        its acquires; the event's ``aim_age_ms`` says how old it was). None when no read was started
        since ``since_ns``."""
        reads = [r for r in self._reads.get(key, ()) if r.started_ns >= since_ns]
        if not reads:
            return None
        read = reads[-1]
        if older_if_running and not _future(read).done():
            done = [r for r in self._reads.get(key, ()) if _future(r).done() and _future(r).exception() is None]
            read = done[-1] if done else read
        waiting = now_ns()
        value = _future(read).result()
        return Fetched(value=value, started_ns=read.started_ns, wait_ms=round((now_ns() - waiting) / 1e6, 3))

    def finished_since(self, key: object, since_ns: int) -> Fetched | None:
        """The newest read of ``key`` started since ``since_ns`` that has finished (never waited for)."""
        done = [r for r in self._reads.get(key, ()) if r.started_ns >= since_ns and _future(r).done()]
        if not done or _future(done[-1]).exception() is not None:
            return None
        return Fetched(value=_future(done[-1]).result(), started_ns=done[-1].started_ns, wait_ms=0.0)

    def has_read_since(self, key: object, since_ns: int) -> bool:
        return any(r.started_ns >= since_ns for r in self._reads.get(key, ()))

    def read_now(self, key: object, read: Callable[[], Any]) -> Fetched:
        """A read made now (a step no acquire triggered: nothing to read ahead of), on the aim's thread."""
        self.read_ahead(key, read)
        fetched = self.read_since(key, self._reads[key][-1].started_ns)
        assert fetched is not None
        return fetched

    def close(self) -> None:
        """Wait for a read still running (its connections are closed next), then stop the thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._reads.clear()


def _future(read: _Read) -> Future[Any]:
    assert read.future is not None, "a read is submitted as it is recorded"
    return read.future


def missed(reason: str) -> Resolution:
    return Resolution(reason=f"missed: {reason}")
