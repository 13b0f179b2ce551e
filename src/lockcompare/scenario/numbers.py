"""The one parser of every number a user types (a setting's value, a fault step's ``for=``, a budget).

Its own module, below the settings table, the fault kinds and the schedule parser, which all read
numbers: none of them imports another for it.
"""

from __future__ import annotations

import math

from lockcompare.errors import InvalidValueError

#: No number lockcompare takes needs more characters than this; a longer one (5 000 digits) is a
#: mistake, refused before ``int()`` (which raises past 4 300 digits) or ``float()`` (inf) sees it.
MAX_NUMBER_CHARS = 32


def parse_number(
    text: str,
    *,
    what: str,
    whole: bool = False,
    low: float | None = None,
    high: float | None = None,
    unit: str = "",
    hint: str = "",
) -> float:
    """The one parser of every number a user types: ASCII digits only (``²`` and other Unicode
    digits are refused, not half-accepted), at most MAX_NUMBER_CHARS, finite, whole where asked,
    within ``low``..``high``; anything else is one InvalidValueError line naming ``what``.

    >>> parse_number("1e3", what="for=", high=600_000), parse_number("7", what="nodes=", whole=True)
    (1000.0, 7)
    """
    text = str(text).strip()
    kind = "a whole number" if whole else "a number"
    shown = text if len(text) <= MAX_NUMBER_CHARS else f"{text[:12]}... ({len(text)} characters)"
    if len(text) > MAX_NUMBER_CHARS:
        raise InvalidValueError(f"{what} takes {kind}, got {shown!r}")
    if not text.isascii():
        raise InvalidValueError(f"{what} takes {kind} (digits 0-9), got {shown!r}")
    try:
        number = float(text)
    except ValueError:
        raise InvalidValueError(f"{what} takes {kind}, got {shown!r}") from None
    if not math.isfinite(number):
        raise InvalidValueError(f"{what} takes a finite number, got {shown!r}")
    if whole and not number.is_integer():
        raise InvalidValueError(f"{what} takes a whole number, got {shown!r}")
    suffix = f" ({hint})" if hint else ""
    if low is not None and number < low:
        raise InvalidValueError(f"{what} must be >= {low:g}{unit}, got {shown}{suffix}")
    if high is not None and number > high:
        raise InvalidValueError(f"{what} must be <= {high:g}{unit}, got {shown}{suffix}")
    return int(number) if whole else number
