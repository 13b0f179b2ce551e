"""Passwords out of every message: the one function that hides them, for URLs and for text holding URLs.

A password reaches lockcompare in a URL (``redis://:pw@host``, ``postgresql://u:pw@host/db``,
``postgresql+psycopg://...``, ``http://u:pw@etcd``), in a query (``?password=pw``) or in a libpq
keyword string (``password=pw``). Messages print URLs the user gave, and errors of libraries may
quote them: every error line and warning goes through :func:`redact` (cli/core.py), as do the
messages that name a server. Parsing is never trusted here — a ``/`` or ``@`` inside a password
breaks every URL parser — so the userinfo is everything up to the *last* ``@`` of the URL, and
over-redacting is the safe side.

>>> redact("redis://:secret@127.0.0.1:6379/0")
'redis://:***@127.0.0.1:6379/0'
>>> redact("redis://user:secret@host:bad/0")
'redis://user:***@host:bad/0'
>>> redact("redis://:a/b@c@127.0.0.1:6379/0")
'redis://:***@127.0.0.1:6379/0'
>>> redact("postgresql+psycopg://u:pw@db:5432/x?sslmode=disable&password=pw2")
'postgresql+psycopg://u:***@db:5432/x?sslmode=disable&password=***'
>>> redact("cannot reach 'http://root:pw@127.0.0.1:2379' (host=h password=pw3 port=5)")
"cannot reach 'http://root:***@127.0.0.1:2379' (host=h password=*** port=5)"
"""

from __future__ import annotations

import re

#: A URL in text: a scheme, ``://`` and everything up to white space or a quote.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]*")
#: A secret given as key=value (a URL's query, a libpq keyword string).
_SECRET_VALUE = re.compile(
    r"((?<![A-Za-z0-9_])(?:password|passwd|pwd|pass|sslpassword|secret|token|auth)=)[^&;\s'\"#]*", re.IGNORECASE
)


def redact(text: str, *, passwords_of: tuple[str, ...] = ()) -> str:
    """``text`` (a URL, or a message quoting URLs) with every password replaced by ``***``.

    ``passwords_of``: URLs whose password may appear in ``text`` cut in pieces (a library that
    misparsed ``u:a/b@host`` quotes ``"a"`` as the port): every piece of it is hidden too.
    """
    text = _SECRET_VALUE.sub(r"\1***", _URL.sub(lambda m: _redact_url(m.group(0)), str(text)))
    for url in passwords_of:
        for piece in sorted(_password_pieces(url), key=len, reverse=True):
            text = text.replace(piece, "***")
    return text


def _password_pieces(url: str) -> set[str]:
    rest = url.partition("://")[2]
    userinfo = rest.rpartition("@")[0]
    if ":" not in userinfo:
        return set()
    password = userinfo.split(":", 1)[1]
    return {password, *(p for p in re.split(r"[/@:?#]", password) if len(p) >= 2)} - {""}


def _redact_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    if "@" not in rest:
        return url
    userinfo, _, host = rest.rpartition("@")
    if ":" not in userinfo and "/" not in userinfo:
        return url  # a user name only (postgresql://user@host): nothing secret
    user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
    return f"{scheme}://{user}:***@{host}"
