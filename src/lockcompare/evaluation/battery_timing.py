"""The battery's two judgements of time, as pure functions (issue 54): how far a lease's claimed
validity reaches from the moments its library's call can have begun, and by when a client must be
granted again after a minority of its nodes died. The properties that use them are in
conformance.py; the rules are in docs/verdicts.md."""

from __future__ import annotations

import dataclasses

from lockcompare.evaluation.backend_host import Timed


@dataclasses.dataclass(frozen=True)
class ValidityReach:
    """How far one lease's claimed validity reaches, from the two moments its library's call can
    have begun: no earlier than the harness's call (``t0``), no later than the call's end less the
    time the library reports it spent (``t1 - library_ns``: an external client's protocol hop is
    the harness's, not the library's). A backend in the host's own process is its call: both are
    ``t0``."""

    from_call_ms: float
    from_library_ms: float

    @classmethod
    def of(cls, timed: Timed, valid_until_ns: int) -> ValidityReach:
        latest_start = timed.t0_ns if timed.library_ns is None else max(timed.t0_ns, timed.t1_ns - timed.library_ns)
        return cls(
            from_call_ms=(valid_until_ns - timed.t0_ns) / 1e6, from_library_ms=(valid_until_ns - latest_start) / 1e6
        )

    def judged(self, *, ttl_ms: float, slack_ms: float) -> str:
        """``within`` the TTL (and the checker's tolerance) even from the harness's call; ``beyond`` it
        even from the latest start (or expired before the call began); else ``unclear``: the excess
        lies inside the hop, and which side of the pipe spent it cannot be seen."""
        if self.from_call_ms <= 0 or self.from_library_ms > ttl_ms + slack_ms:
            return "beyond"
        return "within" if self.from_call_ms <= ttl_ms + slack_ms else "unclear"


#: How long, in elections (the kind's ``recovery_ms``), a node-loss check waits for a leader among the
#: surviving servers before it says it cannot check the lock: without a leader no lock can serve.
LEADER_WAIT_ELECTIONS = 3


def survival_deadline_s(*, election_s: float, reconnect_s: float, leader_after_s: float | None) -> float:
    """Seconds after the crash by which a client connected before it must be granted again: the
    election's allowance twice (once for the servers, once for a client's backoff, which grows as
    long as the outage lasted) and the reconnect. When a leader was first seen later than the
    allowance (``leader_after_s``), the servers took that long, and the backoff's share grows with
    it: the client is not blamed for the servers' slowness."""
    outage_s = max(election_s, leader_after_s or 0.0)
    return 2 * outage_s + reconnect_s
