"""Fault schedules: the text syntax, targets resolved from the lease, skipped steps, and the
schedule runner's records (pure parts on hand-built inputs; the runner against stub faults)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lockcompare.cli import app
from lockcompare.errors import InvalidValueError
from lockcompare.faults.leases import WORDS as LEASE_WORDS
from lockcompare.faults.leases import LeaseSlot
from lockcompare.faults.plan import planned_steps, worker_pauses
from lockcompare.faults.schedule import FaultScheduler
from lockcompare.faults.steps import PlannedStep
from lockcompare.faults.targets import current_owner, resolve_nodes, resolve_worker
from lockcompare.scenario.choices import PauseHow
from lockcompare.scenario.experiments import EXPERIMENTS
from lockcompare.scenario.schedule import NodeTarget, WorkerTarget, at_scale, parse_schedule, read_schedule_file
from lockcompare.scenario.trialspec import Overrides, legacy_faults, make_spec, trial_id_for

#: The common brief's examples: every one must parse and round-trip.
CONTRACT = [
    "pause worker=0 after-acquire=0 every for=1200 how=sigstop",
    "restart nodes=holders:1 after-acquire=50 every for=0 persistence=none",
    "clock-jump nodes=holders:1 after-acquire=50 every by=+2000",
    "crash nodes=3,4 at=start",
    "crash nodes=others:2 after-acquire=0 once",
    "slow nodes=all worker=0 at=start delay=1500",
    "cut nodes=0,1 worker=0 at=start",
    "starve worker=holder after-acquire=0 every for=2000 duty=0.1",
    "session-kill worker=holder after-acquire=50 every",
    "restart nodes=holders:1 after-acquire=50 by=1 every",
]


@pytest.mark.parametrize("text", CONTRACT)
def test_every_contract_example_parses_and_its_canonical_text_round_trips(text: str) -> None:
    schedule = parse_schedule(text)
    assert parse_schedule(schedule.text) == schedule
    assert parse_schedule(schedule.text).text == schedule.text


def test_canonical_text_fills_defaults_and_a_whole_schedule_round_trips() -> None:
    schedule = parse_schedule("  restart  every nodes=holders:2 after-acquire=50 ;crash nodes=4,3 at=start ")
    assert schedule.text == (
        "restart nodes=holders:2 after-acquire=50 every persistence=none; crash nodes=3,4 at=start"
    )
    assert parse_schedule("restart nodes=0 after-acquire=5 by=1").steps[0].follow == 1  # the contract's by=W
    assert parse_schedule("clock-jump nodes=0 after-acquire=5 by=-300").steps[0].param("by") == "-300"
    assert parse_schedule("").text == "" and not parse_schedule("")


def test_every_catalogue_schedule_round_trips() -> None:
    for experiment in EXPERIMENTS.values():
        text = make_spec(backend="redlock", experiment=experiment, trial=0, overrides=Overrides()).faults
        assert parse_schedule(text).text == text


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("explode nodes=0", "unknown kind 'explode'"),
        ("crash at=start", "crash needs nodes="),
        ("crash nodes=0 at=soon", "at= takes start or acquire"),
        ("crash nodes=holders:0 after-acquire=5", "K must be >= 1"),
        ("crash nodes=holders:1 at=start", "there is none at=start"),
        ("restart nodes=0 after-acquire=-5", "after-acquire= must be >= 0 ms"),
        ("restart nodes=0 after-acquire=5 persistence=rdb", "persistence= takes none or aof-always"),
        ("restart nodes=0 after-acquire=5 colour=red", "restart takes no colour="),
        ("restart nodes=0 after-acquire=5 every once", "every and once both given"),
        ("clock-jump nodes=0 after-acquire=5", "clock-jump needs by="),
        ("pause worker=0 after-acquire=50 for=100", "pause lands at the worker's own pause point"),
        ("pause worker=0 after-acquire=0", "pause needs for=MS > 0"),
        ("starve worker=0 after-acquire=0 for=100 duty=1.5", "duty= is the share"),
        ("cut nodes=0 at=start", "cut needs worker="),
        ("crash nodes=0 worker=1 at=start", "it takes nodes=, not worker="),
        ("crash nodes=0 at=start every", "every repeats an after-acquire step"),
        ("crash nodes=0 at=start; restart nodes=0 after-acquire=x", "fault step 2"),
    ],
)
def test_a_bad_schedule_is_one_line_saying_what_and_where(text: str, fragment: str) -> None:
    with pytest.raises(InvalidValueError) as caught:
        parse_schedule(text)
    message = str(caught.value)
    assert "\n" not in message and fragment in message, message


def test_the_cli_refuses_a_bad_schedule_in_one_line_before_any_server(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["run", "--faults", "crash nodes=holders:1 at=start", "--time-scale", "0.1", "--out", str(tmp_path / "x.csv")],
    )
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "there is none at=start" in lines[0], result.stderr


def test_a_schedule_file_in_toml_or_json_gives_the_same_canonical_text(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text('steps = ["cut nodes=3,4 worker=0 at=start", "restart nodes=holders:1 after-acquire=50 every"]\n')
    json = tmp_path / "s.json"
    json.write_text('{"steps": ["cut nodes=3,4 worker=0 at=start", "restart nodes=holders:1 after-acquire=50 every"]}')
    assert (
        read_schedule_file(toml)
        == read_schedule_file(json)
        == parse_schedule("cut nodes=3,4 worker=0 at=start; restart nodes=holders:1 after-acquire=50 every").text
    )
    json.write_text('{"steps": "crash"}')
    with pytest.raises(InvalidValueError, match="expected steps = a list"):
        read_schedule_file(json)


def test_the_faults_setting_is_part_of_the_trial_identity() -> None:
    base = EXPERIMENTS["node-restart"]
    one = make_spec(backend="redlock", experiment=base, trial=0, overrides=Overrides(fault_nodes=1))
    two = make_spec(backend="redlock", experiment=base, trial=0, overrides=Overrides(fault_nodes=2))
    own = make_spec(
        backend="redlock", experiment=base, trial=0,
        overrides=Overrides(fault_nodes=1, faults="restart nodes=0 after-acquire=50 every"),
    )  # fmt: skip
    assert one.faults == "restart nodes=holders:1 after-acquire=50 every for=0 persistence=none"
    assert len({one.trial_id, two.trial_id, own.trial_id}) == 3
    baseline = make_spec(backend="single", experiment=EXPERIMENTS["baseline"], trial=0, overrides=Overrides())
    assert baseline.faults == ""


def test_pauses_are_stop_the_world_by_default_and_sleep_on_request() -> None:
    pause = EXPERIMENTS["client-pause"]
    default = make_spec(backend="single", experiment=pause, trial=0, overrides=Overrides())
    assert "how=sigstop" in default.faults and default.pause_how == "sigstop"
    asleep = make_spec(backend="single", experiment=pause, trial=0, overrides=Overrides(pause_how=PauseHow.SLEEP))
    assert "how=sleep" in asleep.faults and asleep.trial_id != default.trial_id
    pauses = worker_pauses(at_scale(parse_schedule(default.faults), scale=0.5))
    assert pauses[0].pause_ms == 600 and pauses[0].how == "sigstop" and pauses[0].rounds(3) == {0, 1, 2}


# -- targets from a hand-built lease --------------------------------------------------------------

A, B = "owner-a", "owner-b"


def test_holders_are_the_nodes_of_the_current_lease_not_the_first_k() -> None:
    # Node 0 restarted last round and the new lease was granted without it: it holds nothing.
    holders = [None, A, A, A, "?"]
    got = resolve_nodes(NodeTarget("holders", count=2), node_count=5, holders=holders)
    assert got.nodes == (1, 2) and got.lease_owner == A and not got.reason
    # A stale key of B's on one node does not make B the current lease.
    got = resolve_nodes(NodeTarget("holders", count=1), node_count=5, holders=[B, A, A, A, None])
    assert got.nodes == (1,)
    assert resolve_nodes(NodeTarget("others", count=1), node_count=5, holders=holders).nodes == (0,)
    others = resolve_nodes(NodeTarget("others", count=2), node_count=5, holders=holders)
    assert "only 1 node(s) readable and not holding" in others.reason  # node 4 could not be read


def test_a_target_that_cannot_be_resolved_says_why() -> None:
    assert (
        "no lease on any node" in resolve_nodes(NodeTarget("holders", count=1), node_count=3, holders=[None] * 3).reason
    )
    short = resolve_nodes(NodeTarget("holders", count=3), node_count=5, holders=[A, A, None, None, None])
    assert "only 2 node(s) holding the current lease" in short.reason and short.nodes == ()
    assert "cannot be read" in resolve_nodes(NodeTarget("holders", count=1), node_count=3, holders=None).reason
    assert "does not exist" in resolve_nodes(NodeTarget("fixed", indices=(5,)), node_count=5, holders=None).reason


def test_a_tie_goes_to_the_followed_workers_lease() -> None:
    assert current_owner([A, B, None], preferred=B) == B
    assert current_owner([A, B, None]) == A
    assert current_owner([None, "?"]) is None


def test_the_holder_worker_is_the_one_whose_acquire_returned_the_current_lease() -> None:
    owners = {A: 0, B: 1}
    got = resolve_worker(WorkerTarget(None), workers=2, holders=[B, B, A], owners=owners)
    assert got.worker == 1 and got.lease_owner == B
    assert resolve_worker(WorkerTarget(None), workers=2, holders=[None], owners=owners).reason
    assert resolve_worker(WorkerTarget(None), workers=2, holders=None, owners=owners, last_acquirer=0).worker == 0
    assert "does not exist" in resolve_worker(WorkerTarget(3), workers=2, holders=None, owners=owners).reason


# -- the runner, against stub faults and a hand-built lease ----------------------------------------


class _Holders:
    def __init__(self, reads: list[list[str | None]]) -> None:
        self.reads = reads

    def read(self) -> list[str | None]:
        return self.reads.pop(0)

    def close(self) -> None:
        pass


class _Cluster:
    def reset_clocks(self) -> None:
        self.reset = True


class _Fault:
    name = "stub"

    def __init__(self) -> None:
        self.hits: list[tuple[str, list[int]]] = []

    def inject(self, _cluster: Any, nodes: list[int]) -> str:
        self.hits.append(("inject", nodes))
        return "hit"

    def heal(self, _cluster: Any, nodes: list[int]) -> str:
        self.hits.append(("heal", nodes))
        return "healed"


def _scheduler(text: str, reads: list[list[str | None]]) -> tuple[FaultScheduler, _Fault]:
    fault = _Fault()
    fault.hits = []
    steps = [
        PlannedStep(index=p.index, step=p.step, build=lambda _w: fault, heal_after_ns=p.heal_after_ns)
        for p in planned_steps(at_scale(parse_schedule(text), scale=1), ttl_ms=1000)
    ]
    scheduler = FaultScheduler(
        steps=steps,
        cluster=_Cluster(),
        node_count=5,
        workers=2,
        holders=_Holders(reads),  # type: ignore[arg-type]
    )
    # The workers' lease slots (faults/leases.py; plain lists for the shared memory): _acquired holds them.
    scheduler.attach_workers(pids=(), freezer=None, leases=[LeaseSlot([0] * LEASE_WORDS, offset=0) for _ in range(2)])  # type: ignore[arg-type]
    return scheduler, fault


def _acquired(scheduler: FaultScheduler, *, worker: int, round_: int, t_ns: int, owner: str) -> None:
    """A worker's acquire as the runner sees it: its lease slot says held, then it reports the lease."""
    scheduler._aim.slots[worker].hold(round_=round_, valid_until_ns=None)
    scheduler.on_acquired(worker=worker, round_=round_, t_ns=t_ns, owner=owner)


def test_the_runner_aims_at_the_nodes_read_and_records_holders_and_lateness() -> None:
    scheduler, fault = _scheduler("restart nodes=holders:1 after-acquire=0 every", [[None, A, A, A, None]])
    _acquired(scheduler, worker=0, round_=0, t_ns=0, owner=A)
    scheduler.run_due()
    assert fault.hits == [("inject", [1]), ("heal", [1])]  # node 1: node 0 does not hold the lease
    inject, heal = scheduler.events
    assert inject["action"] == "inject" and inject["nodes"] == [1] and inject["target"] == "holders:1"
    assert inject["holders"] == [None, A, A, A, None] and inject["lease_owner"] == A
    assert inject["late_ms"] > 0 and inject["planned_ns"] == 0 and inject["worker"] == -1
    assert heal["action"] == "heal" and heal["nodes"] == [1]


def test_a_step_without_a_lease_is_recorded_as_skipped_and_aimed_nowhere() -> None:
    scheduler, fault = _scheduler("crash nodes=holders:2 after-acquire=0 once", [[None] * 5, [A, None, None, A, None]])
    _acquired(scheduler, worker=0, round_=0, t_ns=0, owner=A)
    scheduler.run_due()
    assert fault.hits == []
    (skipped,) = scheduler.events
    assert skipped["action"] == "skipped" and "no lease on any node" in skipped["reason"] and skipped["nodes"] == []
    # "once" means one injection: a skipped step tries again at the next acquire.
    _acquired(scheduler, worker=0, round_=1, t_ns=0, owner=A)
    scheduler.run_due()
    assert fault.hits == [("inject", [0, 3])]
    scheduler.heal_all()  # a crash heals when the trial ends
    assert fault.hits[-1] == ("heal", [0, 3])


def test_heal_all_heals_every_step_even_when_one_heal_raises() -> None:
    scheduler, fault = _scheduler(
        "crash nodes=0 after-acquire=0 once; crash nodes=1 after-acquire=0 once", [[A] * 5, [A] * 5]
    )
    calls: list[list[int]] = []

    def heal(_cluster: Any, nodes: list[int]) -> str:
        calls.append(nodes)
        raise RuntimeError("heal failed")

    fault.heal = heal  # type: ignore[method-assign]
    _acquired(scheduler, worker=0, round_=0, t_ns=0, owner=A)
    scheduler.run_due()
    with pytest.raises(RuntimeError, match="heal failed"):
        scheduler.heal_all()
    assert sorted(calls) == [[0], [1]]


def test_rows_from_before_schedules_read_back_with_what_they_ran_and_keep_their_ids() -> None:
    """Before schedules, node faults hit nodes 0..K-1: an old row's schedule says so, its id stays,
    and today's experiment (aimed at the lease's nodes) is a different trial."""
    spec = make_spec(
        backend="redlock", experiment=EXPERIMENTS["node-restart"], trial=0, overrides=Overrides(fault_nodes=2)
    )
    assert spec.faults == "restart nodes=holders:2 after-acquire=50 every for=0 persistence=none"
    legacy = legacy_faults(spec.settings())
    assert legacy == "restart nodes=0,1 after-acquire=50 every for=0 persistence=none"
    old_id = trial_id_for(spec.settings() | {"faults": ""})  # an old row: no faults column
    assert trial_id_for(spec.settings() | {"faults": legacy}) == old_id != spec.trial_id
    pause = make_spec(backend="single", experiment=EXPERIMENTS["client-pause"], trial=0, overrides=Overrides())
    assert legacy_faults(pause.settings()) == pause.faults  # a pause ran then as it runs now: same id
    assert pause.trial_id == trial_id_for(pause.settings() | {"faults": ""})


def test_worker_holder_is_the_worker_whose_lease_is_held_when_it_lands_and_its_heal_names_it() -> None:
    """``worker=holder`` needs no server read: the lease that triggered it, if its worker still holds
    it (its lease slot), else the lease another worker holds now (retargeted)."""
    for worker_0_still_holds, expected in ((True, (0, "a2", "struck")), (False, (1, B, "retargeted"))):
        scheduler, _ = _scheduler("starve worker=holder after-acquire=0 once for=0.001 duty=0.5", [])
        _acquired(scheduler, worker=1, round_=0, t_ns=0, owner=B)
        _acquired(scheduler, worker=0, round_=1, t_ns=0, owner="a2")  # the step follows worker 0
        if not worker_0_still_holds:
            scheduler._aim.slots[0].end(round_=1)
        scheduler.run_due()
        while scheduler.seconds_to_next() is not None:
            scheduler.run_due()
        inject, heal = scheduler.events
        assert (inject["target_worker"], inject["lease_owner"], inject["aim"]) == expected
        assert inject["target_worker_spec"] == "holder" and inject["lease_held"] is True
        assert heal["action"] == "heal" and heal["target_worker"] == expected[0]


def test_link_trials_run_each_backend_with_its_own_client_timeout_unless_swept() -> None:
    """Timeouts belong to the backend (redis-py's 5 s default for the library adapters, 2 s for
    lockcompare's own); only trials with slow or cut links record one; --client-timeout-ms sweeps it."""
    from lockcompare.runner.matrix import plan_matrix
    from lockcompare.scenario.parsing import Sweep

    specs = plan_matrix(
        backends=["single", "pottery"], experiments=["partition", "slow-response", "baseline"], trials=1,
        overrides=Overrides(time_scale=0.5), node_count=None,
    )  # fmt: skip
    got = {(s.backend, s.experiment): s.client_timeout_ms for s in specs}
    assert got == {
        ("single", "partition"): 2000, ("single", "slow-response"): 2000, ("single", "baseline"): None,
        ("pottery", "partition"): 5000, ("pottery", "slow-response"): 5000, ("pottery", "baseline"): None,
    }  # fmt: skip
    swept = plan_matrix(
        backends=["pottery"], experiments=["slow-response"], trials=1, overrides=Overrides(time_scale=0.5),
        node_count=None, sweep=Sweep(client_timeout_ms=(600.0, 3000.0)),
    )  # fmt: skip
    assert sorted(s.client_timeout_ms for s in swept) == [300, 1500]  # lesson-scale values, scaled
    assert len({s.trial_id for s in swept}) == 2


def test_schedules_that_cannot_run_are_refused_in_one_line_before_any_server(tmp_path: Path) -> None:
    for faults, fragment in [
        (
            "session-kill worker=holder after-acquire=50 every",
            "session-kill applies to the PostgreSQL and ZooKeeper backends only",
        ),
        ("pause worker=3 after-acquire=0 every for=100", "worker 3 does not exist (2 workers)"),
        ("pause worker=0 after-acquire=0 for=100; pause worker=0 after-acquire=0 for=200", "two pause steps"),
        ("crash nodes=7 at=start", "this backend uses lock nodes 0..4 only"),
        (
            "failover nodes=0 after-acquire=50 once; clock-jump nodes=1 after-acquire=50 by=+2000",
            "failover cannot share a schedule with clock-jump",
        ),
        (
            "failover nodes=0 after-acquire=50 once; restart nodes=1 after-acquire=50 for=0 persistence=aof-always",
            "failover cannot share a schedule with restart persistence=aof-always",
        ),
    ]:
        result = CliRunner().invoke(
            app,
            [
                "run",
                "--backend",
                "redlock",
                "--faults",
                faults,
                "--time-scale",
                "0.1",
                "--out",
                str(tmp_path / "x.csv"),
            ],
        )  # redlock: its five nodes are all its own (a one-node lock refuses steps on nodes it does not use)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and fragment in lines[0], (faults, result.stderr)
    assert not (tmp_path / "x.csv").exists()


def test_an_experiment_may_have_another_schedule_on_another_kind_of_lock_server() -> None:
    """partition on a PostgreSQL lock: a session cut under its holder for one TTL, not from the start."""
    partition = EXPERIMENTS["partition"]
    on_redis = make_spec(backend="single", experiment=partition, trial=0, overrides=Overrides())
    on_pg = make_spec(
        backend="pg-advisory", experiment=partition, trial=0, overrides=Overrides(), lock_servers="postgres"
    )
    assert on_redis.faults == "cut nodes=0 worker=0 at=start"
    assert on_pg.faults == "cut nodes=0 worker=0 after-acquire=50 every for=1000"
