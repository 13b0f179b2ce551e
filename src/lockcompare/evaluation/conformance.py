"""The conformance battery as plain functions: what every lock backend must do, against real nodes.

Each property is a function ``check(ctx) -> evidence`` that returns a line of evidence when the
property holds, raises :class:`PropertyFailed` when it does not, and :class:`NotClaimed` when the
backend does not claim it (``exclusive = False`` claims no mutual exclusion;
``issues_fencing_tokens = False`` no tokens; ``survives_minority_loss`` is optional and False
when absent). A backend call that raises, hangs past the deadline, or returns something that is
not a Lease / Refusal / bool fails the property with that message (see backend_host.py).

Claims are checked before they excuse anything. A backend's declarations about itself —
``has_ttl = False`` (no lease deadline: held while its holder lives), renewing (the hooks
``drain_renewals`` / ``stop_renewal``), checking its lease (a ``before_write`` hook) — each have a
property of their own, ``claim_*``, which tests the claim against the real lock: a lock without a
TTL keeps its lock past any TTL while its holder lives, a renewing lock outlives its TTL while its
holder lives, a lease check learns that the lock went to another client. A claim that fails is a
FAIL naming it; the properties it would excuse (``has_ttl = False`` excuses the TTL properties)
are NOT CLAIMED only once its check passed, and are checked as if it were not made otherwise.

The same functions serve the pytest classes in :mod:`lockcompare.testing` and the report card of
``lockcompare evaluate``, so both always check the same thing. Timings are loose (a 150 ms lease
checked 100 ms after it ends): the battery tests behaviour, not speed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import weakref
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path

from lockcompare.analysis.evidence import LEASE_TOLERANCE_MS
from lockcompare.backends import Lease, declaration_problems
from lockcompare.errors import BackendError, BackendNotViableError
from lockcompare.evaluation.backend_host import (
    BackendCallFailed,
    BackendHost,
    RemoteBackend,
)
from lockcompare.evaluation.battery_base import (
    CALL_TIMEOUT_S,
    PRIVATE_NODES,
    REQUEST_TIMEOUT_S,
    TTL_MS,
    VALIDITY_SLACK_NS,
    BatteryContext,
    CannotCheck,
    NotClaimed,
    Property,
    PropertyFailed,
    PropertyResult,
    RoleWatch,
    Status,
    _crash,
    _elects,
    _escaped_note,
    _expiry_margin_s,
    _first_lease,
    _lease,
    _lease_within,
    _need,
    _recovery_s,
    _refused,
    _short_ttl_ms,
)
from lockcompare.evaluation.battery_log import BatteryLog
from lockcompare.evaluation.battery_timing import LEADER_WAIT_ELECTIONS, ValidityReach, survival_deadline_s
from lockcompare.evaluation.claim_checks import (
    claim_lease_check_learns_of_a_loss,
    claim_no_ttl_holds_past_any_ttl,
    claim_renewal_outlives_the_ttl,
)


def _excused_without_a_ttl(ctx: BatteryContext, reason: str) -> None:
    """NotClaimed for a lock that says it has no TTL — once that claim passed its own check
    (:func:`claim_no_ttl_holds_past_any_ttl`); a lock whose claim failed is checked as if
    it had not made it, and a lock that makes no such claim has a TTL to check."""
    if ctx.claims.has_ttl is not False:
        return
    checked = _claim_result(ctx, "claim_no_ttl_holds_past_any_ttl")
    if checked.status is Status.PASS:
        raise NotClaimed(f"{reason} (has_ttl = False, checked)")


# --- the properties ------------------------------------------------------------------------------


def declares_the_protocol(ctx: BatteryContext) -> str:
    claims = ctx.claims
    problems = declaration_problems(claims)  # the same rule run/matrix apply before measuring
    if problems:
        raise PropertyFailed("; ".join(problems))
    said = [name for name in ("exclusive", "issues_fencing_tokens", "survives_minority_loss") if getattr(claims, name)]
    said += ["has_ttl = False"] if claims.has_ttl is False else []
    said += [name for name in ("renews", "checks_lease") if getattr(claims, name) is True]
    return f"claims: {', '.join(said) or 'nothing'}"


def returns_leases_with_random_owners(ctx: BatteryContext) -> str:
    a, b = ctx.new(), ctx.new()
    key = ctx.key()
    owners = []
    for instance in (a, b, a, b):
        lease = _lease(instance.acquire(key=key, ttl_ms=TTL_MS), "acquire of a free lock")
        if lease.key != key or not isinstance(lease.owner, str) or not lease.owner:
            raise PropertyFailed(f"lease for {key!r} has key {lease.key!r} and owner {lease.owner!r}")
        owners.append(lease.owner)
        if instance.release(lease) is not True:
            raise PropertyFailed("the holder's own release returned False")
    if len(set(owners)) != len(owners):
        raise PropertyFailed(f"owner tokens repeat across leases: {owners}")
    return f"{len(owners)} leases, {len(owners)} distinct owners"


#: How many leases the validity property measures before it says it cannot tell (see ValidityReach).
VALIDITY_ATTEMPTS = 3


def lease_validity_is_within_the_ttl(ctx: BatteryContext) -> str:
    _need(ctx.claims.exclusive, "a non-exclusive backend promises no validity")
    _excused_without_a_ttl(ctx, "the lock has no TTL: it is held as long as its session lives")
    tolerance = f"tolerance {LEASE_TOLERANCE_MS:g} ms, as the checker's"
    slack_ms = VALIDITY_SLACK_NS / 1e6
    unclear: list[str] = []
    for _ in range(VALIDITY_ATTEMPTS):
        instance = ctx.new()
        timed = instance.acquire_timed(key=ctx.key(), ttl_ms=TTL_MS)
        lease = _lease(timed.value, "acquire of a free lock")
        if lease.valid_until_ns is None:
            said = " (it says has_ttl = False: that claim failed its check)" if ctx.claims.has_ttl is False else ""
            raise PropertyFailed(f"the lease never expires (valid_until_ns is None), yet the lock has a TTL{said}")
        reach = ValidityReach.of(timed, lease.valid_until_ns)
        ahead_ms = reach.from_call_ms
        past = (
            f"{ahead_ms - TTL_MS:.1f} ms past the TTL" if ahead_ms > TTL_MS else f"{TTL_MS - ahead_ms:.1f} ms inside it"
        )
        judged = reach.judged(ttl_ms=TTL_MS, slack_ms=slack_ms)
        if judged == "beyond":
            hop = (
                ""
                if reach.from_library_ms == ahead_ms
                else f"; {reach.from_library_ms - TTL_MS:.1f} ms past it from the latest start of its library's call"
            )
            raise PropertyFailed(
                f"a {TTL_MS} ms lease is valid until {ahead_ms:.1f} ms after the call began: {past}{hop} ({tolerance})"
            )
        if judged == "within":
            again = (
                f"; measured again after {len(unclear)} that could not tell ({', '.join(unclear)})" if unclear else ""
            )
            return f"{TTL_MS} ms lease valid for {ahead_ms:.1f} ms from the call: {past} ({tolerance}){again}"
        unclear.append(f"{past}, {ahead_ms - reach.from_library_ms:.1f} ms of the call outside the library")
        instance.release(lease)
    raise CannotCheck(
        f"could not tell in {VALIDITY_ATTEMPTS} leases whether the library or the protocol's hop spent the time "
        f"past the TTL ({'; '.join(unclear)}; {tolerance})"
    )


def refuses_while_held(ctx: BatteryContext) -> str:
    _need(ctx.claims.exclusive, "a non-exclusive backend grants everyone")
    a, b = ctx.new(), ctx.new()
    key = ctx.key()
    lease = _first_lease(ctx, a, key=key, ttl_ms=TTL_MS, doing="first acquire")
    refusal = _refused(b.acquire(key=key, ttl_ms=TTL_MS), "a second client's acquire while the lock is held")
    if a.release(lease) is not True:
        raise PropertyFailed("the holder's release returned False")
    second = _lease(b.acquire(key=key, ttl_ms=TTL_MS), "acquire after the holder released")
    b.release(second)
    return f"second client refused ({refusal.reason}), granted after the release"


def free_again_after_the_ttl(ctx: BatteryContext) -> str:
    """The holder's whole client is frozen (SIGSTOP of its process group) from right after its
    acquire: a lock that renews is then as dead as one that does not, and either must be free a TTL
    after the freeze began (a renewal just before it restarts the TTL no later than that)."""
    _need(ctx.claims.exclusive, "a non-exclusive backend has no TTL")
    _excused_without_a_ttl(ctx, "the lock has no TTL: it is held as long as its session lives")
    (a, holder), b = ctx.new_client_process(), ctx.new()
    key = ctx.key()
    short_ms, margin_s = _short_ttl_ms(ctx), _expiry_margin_s(ctx)
    _first_lease(ctx, a, key=key, ttl_ms=short_ms, doing="first acquire")
    with holder.frozen() as escaped:
        _refused(b.acquire(key=key, ttl_ms=TTL_MS), "acquire while the first lease is valid")
        time.sleep(short_ms / 1000 + margin_s)
        outcome = b.acquire(key=key, ttl_ms=TTL_MS)
    doing = f"acquire {margin_s * 1000:.0f} ms after the TTL of a holder frozen whole{_escaped_note(escaped)}"
    lease = _lease(outcome, doing)
    b.release(lease)
    return f"a {short_ms} ms lease whose holder froze: free again {margin_s * 1000:.0f} ms after its TTL"


def expired_release_spares_the_successor(ctx: BatteryContext) -> str:
    """The holder's whole client is frozen past its TTL (no renewal can keep it), a successor takes
    the lock, and the holder, continued, releases what it believes it holds: a zombie's release."""
    _need(ctx.claims.exclusive, "a non-exclusive backend has no owner")
    _excused_without_a_ttl(ctx, "no TTL, so no expired holder (its session ends, and its release with it)")
    (a, holder), b, c = ctx.new_client_process(), ctx.new(), ctx.new()
    key = ctx.key()
    old = _first_lease(ctx, a, key=key, ttl_ms=_short_ttl_ms(ctx), doing="first acquire")
    with holder.frozen() as escaped:
        time.sleep(_short_ttl_ms(ctx) / 1000 + _expiry_margin_s(ctx))
        outcome = b.acquire(key=key, ttl_ms=TTL_MS)
    new = _lease(outcome, f"the successor's acquire after the frozen holder's lease expired{_escaped_note(escaped)}")
    released = a.release(old)  # the zombie wakes up and releases what it believes it holds
    third = c.acquire(key=key, ttl_ms=TTL_MS)
    if isinstance(third, Lease):
        raise PropertyFailed(
            f"the expired holder's release (returned {released}) deleted its successor's lock: "
            "a third client then acquired it while the successor still held it"
        )
    if released is not False:
        raise PropertyFailed("the expired holder's release returned True although it no longer held the lock")
    if b.release(new) is not True:
        raise PropertyFailed("the successor's own release returned False")
    return "expired holder's release returned False; the successor kept the lock"


#: How long *a paused client is paused* freezes the holder's whole client, in TTLs of its lease.
FREEZE_TTLS = 2
#: How often the rival tries the lock during that freeze.
RIVAL_POLL_S = 0.02


def a_paused_client_is_paused(ctx: BatteryContext) -> str:
    """The holder's whole client — its process and every helper process in its process group (a
    lock client in another language, a renewal daemon) — is frozen (SIGSTOP of the group) for
    FREEZE_TTLS × its TTL (at least the TTL plus twice the expiry margin); nothing of it may renew
    the lease meanwhile.

    Observed from the lock service, as any client sees it: a rival tries to acquire throughout the
    freeze and must be granted once the lease's TTL has run out. A renewal made inside the freeze
    keeps the lock held past it; a helper that keeps renewing (it left the group: ``setsid()``)
    keeps it held for the whole freeze. This needs neither where nor how the backend keeps its
    key (a prefix, a hash, an etcd lease, a row) nor a renewal record the backend might not keep:
    only the protocol's acquire, so it holds for every lock with a TTL. A lock that does not renew
    passes as it should: its frozen client cannot hold it longer either. Helpers that left the
    group are named in the failure.
    """
    _need(ctx.claims.exclusive, "a non-exclusive backend has no lease to renew")
    _excused_without_a_ttl(ctx, "the lock has no TTL: nothing renews it, it is held while its session lives")
    ttl_ms = _short_ttl_ms(ctx)
    freeze_s = max(FREEZE_TTLS * ttl_ms / 1000, ttl_ms / 1000 + 2 * _expiry_margin_s(ctx))
    (holder, client), rival = ctx.new_client_process(), ctx.new()
    key = ctx.key()
    _first_lease(ctx, holder, key=key, ttl_ms=ttl_ms, doing="the holder's acquire")
    free_after_s: float | None = None
    with client.frozen() as escaped:
        started = time.monotonic()
        while free_after_s is None and time.monotonic() - started < freeze_s:
            outcome = rival.acquire(key=key, ttl_ms=TTL_MS)
            if isinstance(outcome, Lease):
                free_after_s = time.monotonic() - started
                rival.release(outcome)
            else:
                time.sleep(RIVAL_POLL_S)
    if free_after_s is None:
        raise PropertyFailed(
            f"the holder's whole client was frozen for {freeze_s * 1000:.0f} ms ({ttl_ms} ms TTL), yet a rival was "
            f"refused throughout: something the freeze did not stop renewed the lease{_escaped_note(escaped)}"
        )
    return (
        f"holder's client frozen {freeze_s * 1000:.0f} ms ({ttl_ms} ms TTL): the lock was free "
        f"{free_after_s * 1000:.0f} ms into the freeze, nothing renewed it"
    )


def fencing_tokens_strictly_increase(ctx: BatteryContext) -> str:
    _need(ctx.claims.issues_fencing_tokens, "the backend issues no fencing tokens")
    a, b = ctx.new(), ctx.new()
    key = ctx.key()
    tokens: list[object] = []

    def take(instance: RemoteBackend, ttl_ms: int, release: bool = True) -> None:
        lease = _lease(instance.acquire(key=key, ttl_ms=ttl_ms), f"acquire #{len(tokens) + 1}")
        tokens.append(lease.fencing_token)
        if release:
            instance.release(lease)

    for instance in (a, b, a):
        take(instance, TTL_MS)
    take(a, _short_ttl_ms(ctx), release=False)  # expires unreleased: the successor's token must still be higher
    if ctx.claims.renews is True:
        a.close()  # a renewing holder's lease expires only once its client is gone (as a crashed holder's)
    time.sleep(_short_ttl_ms(ctx) / 1000 + _expiry_margin_s(ctx))
    take(b, TTL_MS)
    numbers = [t for t in tokens if isinstance(t, int) and not isinstance(t, bool)]
    if len(numbers) != len(tokens):
        raise PropertyFailed(f"fencing tokens are not all integers: {tokens}")
    if any(later <= earlier for earlier, later in pairwise(numbers)):
        raise PropertyFailed(f"fencing tokens do not strictly increase: {tokens}")
    return f"tokens {tokens} (two clients, one takeover after expiry)"


def refuses_without_a_quorum(ctx: BatteryContext) -> str:
    _need(ctx.claims.exclusive, "a non-exclusive backend grants everyone")
    majority = range(PRIVATE_NODES // 2 + 1)  # nodes 0..2 of 5: node 0 is a single-node lock's only node
    with ctx.private_cluster() as cluster:
        before = ctx.new(node_urls=cluster.node_urls)
        _crash(ctx, cluster, majority)
        try:
            after = ctx.new(node_urls=cluster.node_urls)
        except BackendCallFailed as exc:
            raise PropertyFailed(f"construct while a majority of nodes was down: {exc}") from None
        reasons = []
        for who, instance in (("a client connected before", before), ("a client created after", after)):
            try:
                outcome = instance.acquire(key=ctx.key(), ttl_ms=TTL_MS)
            except BackendCallFailed as exc:
                raise PropertyFailed(f"{who} the crash: {exc}") from None
            reasons.append(_refused(outcome, f"acquire by {who} the crash").reason)
    return f"nodes {majority.start}-{majority.stop - 1} of {PRIVATE_NODES} crashed: refused ({', '.join(reasons)})"


def survives_the_loss_of_a_minority(ctx: BatteryContext) -> str:
    """Two of five nodes crash under a client that was connected (it took and released a lock
    first). A consensus service may first elect a leader (the kind's ``recovery_ms``, at least
    :data:`RECOVERY_S`: ZooKeeper's ensembles here up to 20 s, as its leader-crash trials show),
    and a client of some kinds waits before it reconnects elsewhere (the kind's ``reconnect_ms``:
    ZooKeeper's clients up to 1 s): both are allowed, and the clients' request timeout covers the
    reconnect, as a trial's does. A client that backs off while no server serves may come back as
    late again as the election took: kazoo doubles its wait after every round of refused connects
    (0.1 s, 0.2 s, ... with 0.4 s of jitter; measured: rounds at 0.5, 0.9, 1.6, 3.0 and 6.4 s after
    the crash, a leader back at 5.9 s), so after a 13 s election its next round comes at about 25 s.
    The election's allowance is therefore given twice: once for the servers, once for the backoff
    (:func:`survival_deadline_s`). Where the kind's servers elect (its ``recovery_ms``), who leads
    is read every second while the client retries: an election slower than its allowance (26.8 s,
    seen once on a 2-core machine) stretches the backoff's share to match, and a leader not seen
    within :data:`LEADER_WAIT_ELECTIONS` allowances leaves the lock unchecked: SKIPPED, the servers'
    doing. Elsewhere the roles are read too, for the history and a failure's evidence, and change
    nothing."""
    _need(ctx.claims.survives_minority_loss, "the backend does not set survives_minority_loss = True")
    minority = range((PRIVATE_NODES - 1) // 2)  # nodes 0..1 of 5
    election_s, reconnect_s = _recovery_s(ctx)
    within_s = survival_deadline_s(election_s=election_s, reconnect_s=reconnect_s, leader_after_s=None)
    timeout_s = REQUEST_TIMEOUT_S + reconnect_s
    with ctx.private_cluster() as cluster:
        before = ctx.new(node_urls=cluster.node_urls, request_timeout_s=timeout_s)
        # Connected first (a client that connects lazily would otherwise meet the crash unconnected);
        # a client starting cold (a JVM) may take a while: that is not what this property checks.
        warm = _lease_within(before, key=ctx.key(), within_s=within_s, doing="acquire with every node up")
        if before.release(warm) is not True:
            raise PropertyFailed("the holder's release returned False with every node up")
        _crash(ctx, cluster, minority)
        crashed = time.monotonic()
        after = ctx.new(node_urls=cluster.node_urls, request_timeout_s=timeout_s)
        key = ctx.key()
        allowed = f"{election_s:g} s for an election, as long again for a client's backoff" + (
            f" + {reconnect_s:g} s to reconnect" if reconnect_s else ""
        )
        roles = RoleWatch(ctx, cluster)
        roles.read(force=True)
        elects = _elects(ctx)
        leader_after_s: float | None = None
        while True:
            outcome = before.acquire(key=key, ttl_ms=TTL_MS)
            if isinstance(outcome, Lease) or outcome.reason == "held":
                break
            now = time.monotonic() - crashed
            seen = roles.read()
            if elects and leader_after_s is None and seen is not None and seen.leader is not None:
                leader_after_s = now
            if elects and seen is not None and leader_after_s is None:  # the servers have not elected yet
                if now > LEADER_WAIT_ELECTIONS * election_s:
                    raise CannotCheck(
                        f"the surviving servers elected no leader within {now:.0f} s of losing nodes "
                        f"{minority.start}-{minority.stop - 1} of {PRIVATE_NODES}: no lock can serve without one"
                        f"{roles.said()}"
                    )
            elif now > survival_deadline_s(
                election_s=election_s, reconnect_s=reconnect_s, leader_after_s=leader_after_s
            ):
                break
            time.sleep(0.05)
        waited_s = time.monotonic() - crashed
        slow = (
            f"; the servers elected a leader only {leader_after_s:.1f} s after the crash, and the backoff's share grew "
            "to match"
            if leader_after_s is not None and leader_after_s > election_s
            else ""
        )
        try:
            lease = _lease(outcome, f"acquire by a client connected before the crash (retried for {waited_s:.0f} s)")
        except PropertyFailed as exc:
            raise PropertyFailed(f"{exc}{slow}{roles.said()}") from None
        granted_ms = waited_s * 1000
        _refused(after.acquire(key=key, ttl_ms=TTL_MS), "a second client's acquire while the lock is held")
        if before.release(lease) is not True:
            raise PropertyFailed("the holder's release returned False with a majority of nodes up")
        again = _lease(after.acquire(key=key, ttl_ms=TTL_MS), "acquire by a client created after the crash")
        after.release(again)
    return (
        f"nodes {minority.start}-{minority.stop - 1} of {PRIVATE_NODES} crashed: granted {granted_ms:.0f} ms later "
        f"(allowed: {allowed}{slow}), exclusive, released"
    )


#: Per backend host and lock nodes, each claim's check, run once: the claim's own line reports it,
#: and the properties it would excuse consult it.
_CLAIMS_CHECKED: weakref.WeakKeyDictionary[
    BackendHost, dict[tuple[str, tuple[str, ...], Path | None], PropertyResult]
] = weakref.WeakKeyDictionary()


def _claim_result(ctx: BatteryContext, name: str) -> PropertyResult:
    """The claim check ``name`` on this host and these nodes, run on first use (instances closed after)."""
    checked = _CLAIMS_CHECKED.setdefault(ctx.host, {})
    key = (name, ctx.node_urls, ctx.history_dir)
    if key not in checked:
        # the check's own instances and client processes are closed by the check
        outer, ctx.made, outer_hosts, ctx.own_hosts = ctx.made, [], ctx.own_hosts, []
        try:
            checked[key] = check_property(property_named(name), ctx, replay=False)
        finally:
            ctx.made, ctx.own_hosts = outer, outer_hosts
    return checked[key]


def _replayed(name: str) -> Callable[[BatteryContext], str]:
    """A claim's line: its check's result (run now, or already run for a property it excuses)."""

    def check(ctx: BatteryContext) -> str:
        result = _claim_result(ctx, name)
        if result.status is Status.NOT_CLAIMED:
            raise NotClaimed(result.evidence)
        if result.status is Status.SKIPPED:
            raise CannotCheck(result.evidence)
        if result.status is Status.FAIL:
            raise PropertyFailed(result.evidence)
        return result.evidence

    return check


#: Each claim check, by the name of its line.
CLAIM_CHECKS: dict[str, Callable[[BatteryContext], str]] = {
    "claim_no_ttl_holds_past_any_ttl": claim_no_ttl_holds_past_any_ttl,
    "claim_renewal_outlives_the_ttl": claim_renewal_outlives_the_ttl,
    "claim_lease_check_learns_of_a_loss": claim_lease_check_learns_of_a_loss,
}


def _claim_line(name: str, title: str) -> Property:
    return Property(name, title, _replayed(name))


PROPERTIES: tuple[Property, ...] = (
    Property("declares_the_protocol", "declares summary, exclusive, issues_fencing_tokens", declares_the_protocol),
    _claim_line("claim_no_ttl_holds_past_any_ttl", "claim has_ttl = False: held past any TTL while its holder lives"),
    _claim_line("claim_renewal_outlives_the_ttl", "claim renews: a lease outlives its TTL while its holder lives"),
    _claim_line("claim_lease_check_learns_of_a_loss", "claim checks its lease: before_write learns of a loss"),
    Property("acquire_returns_a_lease_with_a_random_owner", "leases carry random owner tokens",
             returns_leases_with_random_owners),
    Property("lease_validity_is_within_the_ttl", "lease validity within the TTL", lease_validity_is_within_the_ttl),
    Property("second_acquire_is_refused_while_held", "refuses a second client while held", refuses_while_held),
    Property("lock_is_free_again_after_the_ttl", "free again after the TTL", free_again_after_the_ttl),
    Property("expired_holder_cannot_release_its_successors_lock", "a release never deletes another owner's lock",
             expired_release_spares_the_successor),
    Property("a_paused_client_is_paused", "a paused client is paused", a_paused_client_is_paused),
    Property("fencing_tokens_strictly_increase", "monotonic fencing tokens", fencing_tokens_strictly_increase),
    Property("refuses_without_a_quorum", "refuses without a quorum of its nodes", refuses_without_a_quorum),
    Property("survives_the_loss_of_a_minority", "survives the loss of a minority of nodes",
             survives_the_loss_of_a_minority),
)  # fmt: skip


def property_named(name: str) -> Property:
    for prop in PROPERTIES:
        if prop.name == name:
            return prop
    raise KeyError(f"no conformance property named {name!r}")


def check_property(prop: Property, ctx: BatteryContext, *, replay: bool = True) -> PropertyResult:
    """Run one property, then close its instances; every outcome becomes a result, never an exception.

    A close that raises or hangs fails a property that had passed (close has the deadline too).
    ``replay=False`` runs a claim's own check rather than its line (see :func:`_claim_result`); a
    claim's line is that check's result, history included. The check's history (battery_log.py) is
    saved under ``ctx.history_dir`` when there is one.
    """
    if replay and prop.name in CLAIM_CHECKS:
        return _claim_result(ctx, prop.name)
    check = prop.check if replay else CLAIM_CHECKS.get(prop.name, prop.check)
    outer, ctx.log = ctx.log, BatteryLog()  # a claim checked inside another property keeps its own
    ctx.log.step("check", property=prop.name, title=prop.title)
    try:
        try:
            result = PropertyResult(prop, Status.PASS, check(ctx))
        except NotClaimed as exc:
            result = PropertyResult(prop, Status.NOT_CLAIMED, str(exc))
        except (BackendNotViableError, CannotCheck) as exc:
            result = PropertyResult(prop, Status.SKIPPED, str(exc))
        except (PropertyFailed, BackendError) as exc:  # BackendError: a call failed, or the class did not load
            result = PropertyResult(prop, Status.FAIL, str(exc))
        try:
            ctx.close_all()
        except BackendCallFailed as exc:
            if result.status is Status.PASS:
                result = PropertyResult(prop, Status.FAIL, str(exc))
        ctx.log.step("check", property=prop.name, status=str(result.status), evidence=result.evidence)
        if ctx.history_dir is None:
            return result
        path = ctx.log.save(ctx.history_dir / f"{prop.name}.jsonl.gz")
        return dataclasses.replace(result, history=path)
    finally:
        ctx.log = outer


@contextlib.contextmanager
def battery(
    *, spec: str, node_urls: tuple[str, ...], call_timeout_s: float = CALL_TIMEOUT_S
) -> Iterator[BatteryContext]:
    """A context for running properties against ``spec`` on the lock nodes ``node_urls``; host stopped after."""
    host = BackendHost(spec=spec, call_timeout_s=call_timeout_s)
    try:
        yield BatteryContext(host=host, node_urls=node_urls)
    finally:
        host.close()
