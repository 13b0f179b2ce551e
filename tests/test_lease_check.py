"""The worker's lease check before the write (issue 17, item 7), on hand-made backends: no Redis.

For a backend that checks its lease (a ``before_write`` hook), a lease is permission to write only
until its own deadline, whatever the hook says; a skipped write is recorded (``lease`` refused,
then ``write-skipped``). A backend without the hook is the lesson's client: it never checks."""

from __future__ import annotations

import time

import pytest

from lockcompare.analysis.history import Recorder
from lockcompare.backends import Lease, Refusal, declaration_problems
from lockcompare.runner.backend_calls import CallSlot, lease_check

S = 1_000_000_000  # ns


class Plain:
    """A backend without a ``before_write`` hook: the lesson's client, which never checks."""


class Believes:
    """A backend whose ``before_write`` answers with a fixed outcome (a renewing lock's belief)."""

    def __init__(self, outcome: Lease | Refusal) -> None:
        self.outcome = outcome

    def before_write(self, lease: Lease) -> Lease | Refusal:
        return self.outcome


def _check(backend: object, lease: Lease) -> tuple[bool, list[tuple[str, object]]]:
    rec = Recorder(worker=0)
    allowed = lease_check(backend, lease, rec, CallSlot([0, 0]))  # type: ignore[arg-type]
    return allowed, [(e["kind"], e.get("reason")) for e in rec.events]


def _lease(valid_for_s: float | None) -> Lease:
    until = None if valid_for_s is None else time.monotonic_ns() + int(valid_for_s * S)
    return Lease(key="k", owner="o", valid_until_ns=until)


def test_a_client_that_does_not_check_always_writes() -> None:
    assert _check(Plain(), _lease(60)) == (True, [])
    assert _check(Plain(), _lease(-1)) == (True, [])  # expired: the checker counts its write as stale


def test_a_lease_within_its_deadline_is_permission() -> None:
    valid = _lease(60)
    assert _check(Believes(valid), valid) == (True, [("lease", None)])
    forever = _lease(None)  # no deadline: never expires
    assert _check(Believes(forever), forever) == (True, [("lease", None)])


def test_a_backend_that_answers_ok_with_a_past_deadline_is_overruled() -> None:
    # What single-renew did after a stop-the-world pause: "ok", with the watchdog's last deadline
    # already behind it; the worker wrote on it and lost updates.
    stale = _lease(-0.5)
    assert _check(Believes(stale), _lease(60)) == (False, [("lease", "expired"), ("write-skipped", "expired")])


def test_a_renewed_deadline_is_permission_even_past_the_acquires() -> None:
    renewed = _lease(60)
    allowed, events = _check(Believes(renewed), _lease(-1))
    assert allowed and events == [("lease", None)]


@pytest.mark.parametrize("reason", ["lost", "expired"])
def test_a_backend_refusal_skips_the_write(reason: str) -> None:
    assert _check(Believes(Refusal(reason)), _lease(60)) == (False, [("lease", reason), ("write-skipped", reason)])


def test_the_declaration_rule_is_one_for_run_matrix_and_the_battery() -> None:
    from lockcompare.evaluation.backend_host import Claims, claims_of
    from lockcompare.evaluation.conformance import PropertyFailed, declares_the_protocol

    class Silent:
        def acquire(self, *, key: str, ttl_ms: int) -> Refusal:
            return Refusal()

    problems = declaration_problems(Silent)
    assert problems == [
        "summary is missing (a non-empty str)",
        "exclusive is missing (a bool)",
        "issues_fencing_tokens is missing (a bool)",
    ]
    ctx = type("Ctx", (), {"claims": claims_of(Silent)})()
    with pytest.raises(PropertyFailed) as failed:
        declares_the_protocol(ctx)  # type: ignore[arg-type]
    assert str(failed.value) == "; ".join(problems)
    assert declaration_problems(Claims(summary="s", exclusive=True, issues_fencing_tokens=False)) == []
