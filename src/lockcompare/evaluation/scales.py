"""The time scale a backend can run at: one rule for ``evaluate``, its search and ``explore``.

A backend that cannot grant every TTL (its optional ``check_ttl`` classmethod raises
InvalidValueError: python-redis-lock's whole seconds, etcd's whole-second leases) runs at the first
of the larger scales at which it can, and the command says so in one warning line. The matrix
leaves such a cell out instead (runner/matrix.py ``_unfit``, the same ``check_ttl``): it runs the
scale it was asked for, where a report card runs the backend at a scale it can express.
"""

from __future__ import annotations

from collections.abc import Sequence

from lockcompare.errors import InvalidValueError


def expressible_scale(cls: type, *, ttl_ms: float, scales: Sequence[float]) -> float | None:
    """The first of ``scales`` at which ``cls`` can express a ``ttl_ms`` (lesson-scale) TTL; None if none."""
    check_ttl = getattr(cls, "check_ttl", None)
    for scale in scales:
        try:
            if check_ttl is not None:
                check_ttl(ttl_ms=round(ttl_ms * scale))
        except InvalidValueError:
            continue
        return scale
    return None
