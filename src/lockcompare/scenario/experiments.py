"""The experiment catalogue: named timings + a fault schedule applied to the same workload.

Defaults follow the lesson's lab: 2 workers x 40 rounds, 300 ms of work, TTL 1000 ms. Every time
is given at the lesson's scale and multiplied by ``time_scale``, so a quick run keeps the ratios.

Each experiment's faults are a schedule (scenario/schedule.py) written as a template whose fields are
filled from the trial's settings (:func:`schedule_text`): ``{k}`` (``--fault-nodes``),
``{first_k}`` (nodes ``0..K-1``), ``{restart_delay_ms}``, ``{persistence}``, ``{jump_ms}`` (2 x TTL),
``{slow_ms}`` (TTL + work/2). A pause (``pause_ms`` > 0, or ``--pause-ms``) adds one ``pause`` step
per paused worker. ``--faults`` replaces the whole schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockcompare.errors import UnknownNameError
from lockcompare.protocols import DEFAULT_PROTOCOL, POSTGRES_PROTOCOL, ZOOKEEPER_PROTOCOL


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """A named setting: lesson-scale times and which faults apply."""

    name: str
    claim: str
    ttl_ms: float = 1000
    work_ms: float = 300
    pause_ms: float = 0  # > 0: the pausing workers freeze this long right after acquiring
    #: Where that pause lands when --pause-point is not given (None: the setting's default, after-acquire).
    pause_point: str | None = None
    rounds: int | None = None  # rounds per worker when --rounds is not given (None: the lesson's 40)
    #: The fault schedule, a template filled by :func:`schedule_text` (pause steps come from pause_ms).
    faults: str = ""
    #: What the experiment did before schedules, where that differs (node faults hit nodes 0..K-1,
    #: not the lease's): the schedule of its older results rows, which keeps their trial ids.
    legacy_faults: str | None = None
    #: A different schedule where the lock nodes are another kind of server (the backend's ``servers``).
    faults_on: tuple[tuple[str, str], ...] = ()
    #: How long a round may wait for the lock (None: DEFAULT_ACQUIRE_TIMEOUT_MS). Node faults make a
    #: lock unavailable on purpose: there a round gives up after 2 TTLs instead of a minute.
    acquire_timeout_ms: float | None = None
    #: Whether --fault-nodes K says how many nodes the fault hits (False: the experiment fixes them).
    takes_fault_nodes: bool = True
    #: Work longer than the TTL, so its claim is about a renewing lock's watchdog: a backend that does
    #: not renew loses every lease to its own TTL, fault or not, and the plan leaves it out.
    rests_on_renewal: bool = False
    #: What the resource checks for a fencing backend when ``--fence`` is not given (None: the table's).
    fence: str | None = None

    @property
    def kinds(self) -> frozenset[str]:
        """The fault kinds of its schedule (scenario/faultkinds: the same names as in the steps)."""
        return frozenset(words[0] for words in (part.split() for part in self.faults.split(";")) if words)

    def uses(self, setting: str) -> bool:
        """Whether the schedule template reads ``setting`` (a field such as ``restart_delay_ms``)."""
        return "{" + setting + "}" in self.faults


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            name="baseline",
            claim="TTL 1000 > work 300, no faults: a correct lock gives 0 conflicts; none lets most entries "
            "conflict here (the lesson's lab measured 41/80; docs/lesson.md says why free-running workers differ)",
        ),
        Experiment(
            name="short-ttl",
            ttl_ms=200,
            claim="TTL 200 < work 300: a textbook-correct lock with too short a TTL is no better than none "
            "(every entry but the first conflicts)",
        ),
        Experiment(
            name="client-pause",
            pause_ms=1200,
            claim="worker 0 is stopped (SIGSTOP, every thread) 1200 ms after acquiring (TTL 1000): the lock lets a "
            "second worker in (--pause-how sleep: only the worker's own thread sleeps)",
        ),
        # Kleppmann's pause during the acquire (issue 51): the requests are out, the grants wait in the
        # sockets while the client is stopped for longer than the TTL, then it reads them. Redlock's elapsed
        # time (T1 before the first SET, T2 after the last reply read) includes the pause: validity <= 0.
        # single computes the deadline from before its SET and never looks at it again.
        Experiment(
            name="acquire-pause",
            pause_ms=1200,
            pause_point="in-acquire",
            claim="worker 0 is stopped (SIGSTOP) for 1200 ms inside each acquire, its requests sent and their "
            "replies unread (TTL 1000): redlock reads its grants after the keys expired, its elapsed-time check "
            "refuses (validity) and it stays exclusive; single takes the expired grant as a lease and conflicts. "
            "Only locks whose acquire sends and reads in steps of their own can be stopped there (redlock, single "
            "and those built on its acquire); the plan leaves the others out, saying so",
        ),
        Experiment(
            name="node-crash",
            acquire_timeout_ms=2000,
            faults="crash nodes=holders:{k} after-acquire=50 once",
            legacy_faults="crash nodes={first_k} after-acquire=50 once",
            # ZooKeeper: a three-server ensemble whose node 0 is its leader (the kind's LockNodes).
            faults_on=((ZOOKEEPER_PROTOCOL, "crash nodes=0 after-acquire=50 once"),),
            claim="--fault-nodes K lock nodes holding worker 0's first lease die, and stay down: "
            "single becomes unavailable; redlock keeps granting with K < 3 of 5",
        ),
        Experiment(
            name="node-restart",
            acquire_timeout_ms=2000,
            faults="restart nodes=holders:{k} after-acquire=50 every for={restart_delay_ms} persistence={persistence}",
            # ZooKeeper: its one standalone server, once (a JVM takes seconds to start; it persists on its own).
            faults_on=((ZOOKEEPER_PROTOCOL, "restart nodes=0 after-acquire=50 once for={restart_delay_ms}"),),
            legacy_faults="restart nodes={first_k} after-acquire=50 every for={restart_delay_ms} "
            "persistence={persistence}",
            claim="K nodes holding the current lease (read from the nodes) are SIGKILLed and restart empty "
            "(every round): single "
            "loses the lock; redlock with one node restarted mostly holds, and loses only a lease that was "
            "a bare majority (3 of 5, granted while the rival released) struck on one of its three nodes; "
            "--restart-delay-ms >= TTL or --persistence aof-always keeps it exclusive",
        ),
        Experiment(
            name="clock-jump",
            acquire_timeout_ms=2000,
            faults="clock-jump nodes=holders:{k} after-acquire=50 every by=+{jump_ms}",
            legacy_faults="clock-jump nodes={first_k} after-acquire=50 every by=+{jump_ms}",
            claim="the wall clocks of K nodes holding worker 0's lease jump 2 x TTL forward (every "
            "round): single loses the lock; redlock with one node jumped loses far less, but not nothing: "
            "each lease that was a bare majority (3 of 5) loses to one jumped node",
        ),
        Experiment(
            name="clock-jump-back",
            acquire_timeout_ms=2000,
            faults="clock-jump nodes=holders:{k} after-acquire=50 every by=-{jump_ms}",
            claim="the wall clocks of K nodes holding worker 0's lease jump 2 x TTL backward (every round): "
            "keys live longer, nobody gets in early: 0 conflicts; the cost is waiting (entries, wall time)",
        ),
        Experiment(
            name="bare-majority",
            acquire_timeout_ms=2000,
            takes_fault_nodes=False,
            faults="cut nodes=3,4 worker=0 at=start; restart nodes=holders:1 after-acquire=50 every "
            "for={restart_delay_ms} persistence={persistence}",
            claim="worker 0 cannot reach nodes 3,4 (down, for its leases), so each of its leases is granted by "
            "exactly 3 of 5; one of those 3 restarts empty 50 ms after each acquire: redlock lets worker 1 "
            "in (a minority fault breaks a bare majority); --restart-delay-ms >= TTL or --persistence "
            "aof-always keeps it exclusive",
        ),
        Experiment(
            name="failover",
            acquire_timeout_ms=2000,
            faults="failover nodes={first_k} after-acquire=50 once",
            claim="each lock node is a master + async replica; the replication of --fault-nodes K nodes is "
            "held back, their masters die while worker 0 holds its first lease and the replicas are "
            "promoted: single loses the lock (--wait-replicas 1: refuses instead); redlock stays exclusive "
            "with K < 3 of 5; fenced tokens go backwards and the resource refuses the new holder's writes",
        ),
        Experiment(
            name="renewal-pause",
            rests_on_renewal=True,
            work_ms=3000,
            pause_ms=1500,
            rounds=5,
            claim="work 3000 > TTL 1000 with a renewing lock, worker 0 paused 1500 ms: renewal survives "
            "--pause-how sleep (only one thread sleeps), not sigstop (the watchdog freezes too)",
        ),
        Experiment(
            name="session-kill",
            acquire_timeout_ms=2000,
            takes_fault_nodes=False,
            faults="session-kill worker=holder after-acquire=50 every",
            claim="50 ms into each of worker 0's leases the database ends the session holding the lock "
            "(pg_terminate_backend, as an administrator, idle_session_timeout or a pooler would): pg-advisory "
            "releases the lock under a holder that still runs (conflicts); pg-lease's row outlives the session "
            "(exclusive); on ZooKeeper the holder's session is closed. PostgreSQL and ZooKeeper backends only",
        ),
        Experiment(
            name="cpu-starvation",
            rests_on_renewal=True,
            work_ms=3000,
            rounds=5,
            takes_fault_nodes=False,
            faults="starve worker=holder after-acquire=0 every for=3000 duty=0.1 period=1500",
            claim="work 3000 > TTL 1000 with a renewing lock; the holder's process is stopped 1350 ms of every "
            "1500 (SIGSTOP/SIGCONT strobe) while it works: its watchdog renews only when the process runs, "
            "and the key expires in the stopped stretches",
        ),
        # The cut-off renewing holder (issue 51): a lock service cannot tell a paused holder from one
        # cut off from it. The holder keeps working (and can still reach the resource) while its
        # renewals stop reaching every lock node; 2 x TTL outlasts its lease.
        Experiment(
            name="renewal-cut",
            work_ms=3000,
            rounds=5,
            takes_fault_nodes=False,
            rests_on_renewal=True,
            faults="cut nodes=all worker=holder after-acquire=500 every for={jump_ms}",
            claim="work 3000 > TTL 1000 with a renewing lock; 500 ms into each of worker 0's leases the holder is "
            "cut off from "
            "every lock node (not from the resource) for 2 x TTL: its renewals fail, its lease lapses while it "
            "works and a rival is granted (conflicts); a lock that checks its lease before the write skips it "
            "(no loss); the others lose updates, fenced ones with the token checked on the write only too (the "
            "cut holder writes before its successor's first write raised the mark); --fence all loses none",
        ),
        # Antirez's answer to Kleppmann ("Is Redlock safe?"): the resource compares-and-sets on the lease's
        # random token, no fencing counter needed. The same faults as client-pause and partition-clock-jump.
        Experiment(
            name="client-pause-token",
            pause_ms=1200,
            fence="token",
            claim="client-pause with antirez's token check (--fence token: the resource compares-and-sets on the "
            "lease's random token): the second worker gets in, but neither colliding write is lost: the "
            "resource refuses the write whose token is no longer the one it holds",
        ),
        Experiment(
            name="partition-clock-jump-token",
            acquire_timeout_ms=2000,
            takes_fault_nodes=False,
            fence="token",
            faults="cut nodes=3,4 worker=0 at=start; cut nodes=1,2 worker=1 at=start; "
            "clock-jump nodes=0 after-acquire=50 every by=+{jump_ms}",
            claim="partition-clock-jump (Kleppmann's A,B,C / C,D,E) with antirez's token check (--fence token): "
            "both workers hold a majority at once (conflicts), but no update is lost",
        ),
        # Clock drift as a rate (issue 51): every lock node's wall clock runs fast for the whole trial
        # while the holder works 800 of its 1000 ms (Redlock's validity: TTL - 1 % - 2 ms = 988 ms).
        # Whether the key outlives what the client was told is the question: at x1.01 it expires at 990
        # ms (the allowance covers it), at x1.4 at 714 ms, 274 ms inside the validity and 86 ms inside the
        # section. Work 950 and 900 with x1.01 ran past the key's expiry on a 2-core machine at load 20
        # (sections stalled 100 ms): 200 ms of slack keep the covered case the lock's, not the machine's.
        # Lesson scale only (x0.1 leaves 20 ms margins).
        Experiment(
            name="clock-drift-covered",
            work_ms=800,
            rounds=10,
            takes_fault_nodes=False,
            faults="clock-drift nodes=all at=start rate=1.01",
            claim="every lock node's clock runs 1 % fast, work 800 of TTL 1000: the keys expire at 990 ms, after "
            "the validity Redlock computed (988 ms: its allowance, 1 % + 2 ms, covers the drift): 0 conflicts",
        ),
        Experiment(
            name="clock-drift",
            work_ms=800,
            rounds=10,
            takes_fault_nodes=False,
            faults="clock-drift nodes=all at=start rate=1.4",
            claim="every lock node's clock runs 40 % fast, work 800 of TTL 1000: the keys expire at 714 ms, 274 ms "
            "inside the validity Redlock computed (its allowance is 12 ms) and before the section ends: a rival is "
            "granted while the holder works under a lease it was told is valid; the quorum does not help when "
            "every node drifts",
        ),
        # Kleppmann's delayed write (issue 51): the holder's write leaves while its lease is valid and is
        # held on the wire to the resource past the lease's end and past its successor's write. 100 ms
        # into the lease the read is done; the write, sent ~300 ms in, lands TTL + work/2 later.
        Experiment(
            name="delayed-write",
            takes_fault_nodes=False,
            faults="resource-delay worker=holder after-acquire=100 every for=400 delay={slow_ms}",
            claim="worker 0's requests to the resource (not to the lock) are held TTL + work/2 on the wire from "
            "100 ms into each lease, for 400 ms: its write, sent inside the lease, lands after the lease ended "
            "and after its successor's write: single and redlock lose updates; fenced refuses the late writes "
            "(checked on the write only, one landing between its successor's read and write is still lost); "
            "a renewing lock keeps its lease while the holder waits for the write's reply: exclusive",
        ),
        # Link experiments (faults/network.py): each worker reaches each lock node through a proxy.
        Experiment(
            name="slow-response",
            acquire_timeout_ms=2000,
            takes_fault_nodes=False,
            faults="slow nodes=all worker=0 at=acquire delay={slow_ms}",
            claim="every reply from the lock nodes reaches worker 0 TTL + work/2 late (its requests land on "
            "time): redlock refuses it (0 conflicts; its per-node timeout TTL/10 gives up first: no-quorum; "
            "pottery waits and refuses for validity); single enters anyway and conflicts",
        ),
        Experiment(
            name="partition",
            acquire_timeout_ms=2000,
            faults="cut nodes={first_k} worker=0 at=start",
            # A session lock cut off from the start is never taken, which shows nothing; the question is
            # what the server does with a session cut *under its holder*: cut 50 ms into each of worker
            # 0's leases for one TTL (the server ends it only if --idle-session-timeout-ms fires first;
            # TCP keepalives cannot: the proxy keeps the server's side of the connection alive).
            # ZooKeeper: the holder cut off from the whole ensemble for 2 x TTL (its session expires).
            faults_on=(
                (POSTGRES_PROTOCOL, "cut nodes=0 worker=0 after-acquire=50 every for={ttl_ms}"),
                (ZOOKEEPER_PROTOCOL, "cut nodes=all worker=holder after-acquire=50 every for={jump_ms}"),
            ),
            claim="worker 0 is cut off (blackhole) from lock nodes 0..K-1 for the whole trial: redlock keeps "
            "granting with K < 3 of 5 and refuses worker 0 (no-quorum) with K >= 3; single is unavailable "
            "to worker 0 (node 0 is cut); 0 conflicts either way",
        ),
        Experiment(
            name="partition-clock-jump",
            acquire_timeout_ms=2000,
            takes_fault_nodes=False,
            faults="cut nodes=3,4 worker=0 at=start; cut nodes=1,2 worker=1 at=start; "
            "clock-jump nodes=0 after-acquire=50 every by=+{jump_ms}",
            claim="Kleppmann's scenario: worker 0 reaches nodes 0,1,2, worker 1 reaches 0,3,4; node 0's clock "
            "jumps 2 x TTL while worker 0 holds its lease: both hold a majority at once (redlock conflicts); "
            "single (node 0) conflicts; fenced with --fence all loses nothing (checked on the write only it "
            "loses updates: the old holder, mid-section, writes before its successor does)",
        ),
        # Server faults aimed by role (issue 40): the servers' kind says at injection time who leads
        # (etcd's member status, ZooKeeper's srvr mode; a Redis kind's "leader" is node 0, the node
        # single-node backends use) and which server the holder's client is attached to; the events
        # record who led before and who leads at the heal. 10 rounds: the fault strikes once, in the
        # first lease; what follows is the cluster's recovery. 3 x TTL outlasts etcd's election timeout
        # (500 ms) and ZooKeeper's syncLimit (1 s) at the lesson's scale; the servers' own timeouts are
        # not scaled, so at --time-scale < 1 a freeze or a partition may end before anyone notices.
        Experiment(
            name="leader-crash",
            acquire_timeout_ms=4000,
            rounds=10,
            takes_fault_nodes=False,
            faults="crash nodes=leader after-acquire=50 once",
            claim="the leading lock server (etcd's raft leader, ZooKeeper's leader; node 0 of independent Redis "
            "nodes) is SIGKILLed 50 ms into worker 0's first lease and stays down: a quorum lock elects a new "
            "leader and stays exclusive; single is unavailable; redlock keeps 4 of 5",
        ),
        Experiment(
            name="leader-freeze",
            acquire_timeout_ms=4000,
            rounds=10,
            takes_fault_nodes=False,
            faults="node-freeze nodes=leader after-acquire=50 once for=3000",
            claim="the leading lock server is stopped (SIGSTOP) for 3 x TTL 50 ms into worker 0's first lease, then "
            "continued: the others elect a new leader meanwhile; the old one wakes up believing it leads",
        ),
        Experiment(
            name="leader-isolated",
            acquire_timeout_ms=4000,
            rounds=10,
            takes_fault_nodes=False,
            faults="isolate nodes=leader after-acquire=50 once for=3000",
            claim="the leading lock server is cut off from its peers (not from its clients) for 3 x TTL, 50 ms "
            "into worker 0's first lease: the majority elects a new leader; clients still attached to the old "
            "one wait or fail; Redis nodes have no peers to be cut from",
        ),
        # The same leader faults while renewing holders work past the TTL, every round (issue 51): a strike
        # once, 50 ms into a 300 ms section, ends before any lease could lapse and says nothing about it.
        Experiment(
            name="leader-freeze-renewing",
            acquire_timeout_ms=4000,
            work_ms=3000,
            rounds=5,
            takes_fault_nodes=False,
            rests_on_renewal=True,
            faults="node-freeze nodes=leader after-acquire=500 every for={jump_ms}",
            claim="work 3000 > TTL 1000 with a renewing lock; 500 ms into each of worker 0's leases the leading "
            "lock server is stopped (SIGSTOP) for 2 x TTL: the holder's keepalives meet the frozen leader and get "
            "no answer, the others elect a leader and the lease lapses under the live holder: etcd's locks break "
            "(a rival granted over the live lease, or lost updates; fenced on the write only too)",
        ),
        Experiment(
            name="leader-isolated-renewing",
            acquire_timeout_ms=4000,
            work_ms=3000,
            rounds=5,
            takes_fault_nodes=False,
            rests_on_renewal=True,
            faults="isolate nodes=leader after-acquire=500 every for={jump_ms}",
            claim="work 3000 > TTL 1000 with a renewing lock; 500 ms into each of worker 0's leases the leading "
            "lock server is cut off from its peers (not from its clients) for 2 x TTL: a holder attached to it "
            "renews against a leader that cannot commit, the majority elects another and the lease lapses under "
            "the holder: etcd's locks break; Redis nodes have no peers to be cut from",
        ),
        Experiment(
            name="holder-minority",
            acquire_timeout_ms=4000,
            rounds=10,
            takes_fault_nodes=False,
            faults="split minority=holder-member after-acquire=50 once for=3000",
            claim="the server worker 0's client is attached to is cut off from the other servers for 3 x TTL, 50 ms "
            "into its first lease: the holder's session is on the minority side; the lock must not be granted "
            "to another worker while the holder can still write",
        ),
        Experiment(
            name="lost-reply",
            takes_fault_nodes=False,
            faults="lost-reply worker=0 after-acquire=0 every",
            claim="the reply to each of worker 0's increments is lost after the increment landed, and the "
            "worker sends it again: atomic applies it twice (double applications), idempotent (an "
            "idempotency key the resource remembers) once. Acts on the increment sections only (atomic, idempotent)",
        ),
    )
}


#: What ``matrix`` runs when --experiments is not given: the lesson's table. The fault experiments
#: are opt-in: each needs its own settings (--fault-nodes, ...) and the lesson's scale or 0.5.
DEFAULT_EXPERIMENTS = ("baseline", "short-ttl", "client-pause")


def schedule_text(
    experiment: Experiment,
    *,
    fault_nodes: int,
    restart_delay_ms: float,
    persistence: str,
    ttl_ms: float,
    work_ms: float,
    pause_ms: float,
    pause_how: str,
    pause_point: str,
    paused_workers: tuple[int, ...],
    legacy: bool = False,
    lock_servers: str = DEFAULT_PROTOCOL,
) -> str:
    """The experiment's schedule filled from the settings (lesson-scale ms: the runner scales them);
    ``legacy``: what it ran before schedules (:attr:`Experiment.legacy_faults`)."""
    template = dict(experiment.faults_on).get(lock_servers, experiment.faults)
    if legacy and experiment.legacy_faults is not None:
        template = experiment.legacy_faults
    text = template.format(
        ttl_ms=f"{ttl_ms:g}",
        k=fault_nodes,
        first_k=",".join(str(i) for i in range(fault_nodes)),
        restart_delay_ms=f"{restart_delay_ms:g}",
        persistence=persistence,
        jump_ms=f"{2 * ttl_ms:g}",
        slow_ms=f"{ttl_ms + work_ms / 2:g}",
    )
    if pause_ms > 0:
        pauses = [
            f"pause worker={w} after-acquire=0 every for={pause_ms:g} how={pause_how} point={pause_point}"
            for w in paused_workers
        ]
        text = "; ".join(filter(None, [text, *pauses]))
    return text


def get_experiment(name: str) -> Experiment:
    try:
        return EXPERIMENTS[name]
    except KeyError:
        raise UnknownNameError(f"unknown experiment {name!r} (known: {', '.join(EXPERIMENTS)})") from None


def rests_on_renewal(name: str) -> bool:
    """Whether experiment ``name`` outlasts the TTL on purpose (False for a name not in the catalogue)."""
    experiment = EXPERIMENTS.get(name)
    return experiment is not None and experiment.rests_on_renewal
