"""Did a renewal experiment's trial measure its fault, or the missing renewal?

An experiment whose work outlasts the TTL (``rests_on_renewal``: renewal-pause, cpu-starvation,
renewal-cut, the leader faults under renewing work) asks what a fault does to a lock that renews its
lease while its holder works. On a lock with a TTL that never renews, every lease lapses under its
holder with no fault at all: such a trial measures the missing renewal, and its verdict says nothing
about the fault (issue 51: the Python etcd lock, before it renewed, lost 5 updates in 10 entries
under ``baseline --work-ms 3000``). The plan leaves such cells out today (runner/plan.py); files
measured before keep their rows, which ``scripts/rejudge.py`` judges again with this rule.

The evidence is the history's own: a renewing lock records its renewals (``renew`` events, from its
watchdog or its external client), every one of the committed rows of a renewing backend has them;
a grant without a deadline needs none: a session lock (``no_ttl``), and the control and the lock-free
alternatives, whose grants hold no lease (``valid_until`` null) and so have nothing to renew.

>>> acquire = {"worker": 0, "kind": "acquire", "ok": True, "t0": 0, "t1": 1, "valid_until": 1000}
>>> bool(renewal_not_measured([acquire], rests_on_renewal=True))
True
>>> renewal_not_measured([acquire, {"worker": 0, "kind": "renew", "t0": 2, "t1": 3}], rests_on_renewal=True)
''
>>> renewal_not_measured([acquire], rests_on_renewal=False)
''
>>> renewal_not_measured([{**acquire, "valid_until": None}], rests_on_renewal=True)  # no lease (the control)
''
"""

from __future__ import annotations

from collections.abc import Sequence

from lockcompare.analysis.history import Event
from lockcompare.analysis.rules import implements


@implements("renewal-not-measured")
def renewal_not_measured(history: Sequence[Event], *, rests_on_renewal: bool) -> str:
    """Why the trial measured the missing renewal, not its fault ("" when it did not, or when its
    experiment does not rest on renewal)."""
    if not rests_on_renewal:
        return ""
    granted = [e for e in history if e["kind"] == "acquire" and e.get("ok")]
    if not granted or any(e.get("no_ttl") or e.get("valid_until") is None for e in granted):
        return ""  # nothing granted (judged as such), a session lock, or no lease at all: no deadline to renew
    if any(e["kind"] == "renew" for e in history):
        return ""
    return (
        "renewal not measured: the work outlasts the TTL and the history shows no renewal: the lock "
        "does not renew, so the trial measured the missing renewal, not its fault"
    )
