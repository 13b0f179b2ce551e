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

A space or a quote inside a password, a full-width ``＠`` in place of ``@``, a quoted keyword value
(issue 38):

>>> redact("redis server 'redis://:ab s3cret@127.0.0.1:1/0' does not answer")
"redis server 'redis://:***@127.0.0.1:1/0' does not answer"
>>> redact("zk://u:s3cret＠127.0.0.1:1 and redis://:a'b@h:1/0")
'zk://u:***@127.0.0.1:1 and redis://:***@h:1/0'
>>> redact("host=h password='a b c' dbname=x")
'host=h password=*** dbname=x'

And every password the command was given (:func:`remember_secrets`) wherever it appears, whole.
"""

from __future__ import annotations

import re

#: A URL in text: a scheme, ``://`` and everything up to white space or a quote.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]*")
#: Where a URL starts in text.
_SCHEME_START = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
#: ``@`` and the characters NFKC turns into it (a full-width ``＠`` is an ``@`` to some parsers).
_ATS = "@\uff20\ufe6b"
#: The host after a userinfo's ``@``: a name, an address or a bracketed IPv6 address.
_HOST_AFTER = re.compile(r"(?:\[[0-9A-Fa-f:.%\w]*\]|[\w.\-]+)")
#: A secret given as key=value (a URL's query, a libpq keyword string, its value maybe quoted).
_SECRET_VALUE = re.compile(
    r"((?<![A-Za-z0-9_])(?:password|passwd|pwd|pass|sslpassword|secret|token|auth)\s*[=\uff1d]\s*)"
    r"(?:'(?:[^'\\]|\\.)*'?|[^&;\s'\"#]*)",
    re.IGNORECASE,
)
#: The passwords this command was given (see :func:`remember_secrets`); hidden wherever they appear.
_SECRETS: set[str] = set()
#: Shorter passwords are hidden by their place in a URL only: replacing every "ab" in a message
#: would garble it while hiding nothing an attacker could not guess.
_MIN_SECRET = 4


def redact(text: str, *, passwords_of: tuple[str, ...] = ()) -> str:
    """``text`` (a URL, or a message quoting URLs) with every password replaced by ``***``.

    ``passwords_of``: URLs whose password may appear in ``text`` cut in pieces (a library that
    misparsed ``u:a/b@host`` quotes ``"a"`` as the port): every piece of it is hidden too.
    """
    text = str(text)
    for secret in sorted(_SECRETS, key=len, reverse=True):  # first: whole, before a pattern cuts it
        text = text.replace(secret, "***")
    text = _SECRET_VALUE.sub(r"\1***", _redact_urls(text))
    for url in passwords_of:
        for piece in sorted(_password_pieces(url), key=len, reverse=True):
            text = text.replace(piece, "***")
    return text


def remember_secrets(values: list[str] | tuple[str, ...], *, passwords: tuple[str, ...] = ()) -> None:
    """Note the passwords inside ``values`` (a command line's arguments) and the ``passwords``
    themselves (an environment variable's): :func:`redact` then hides each of them wherever it
    appears, whatever form carried it."""
    from lockcompare.urls import parse_url  # small, no dependency: a cycle-free late import

    _SECRETS.update(p for p in passwords if len(p) >= _MIN_SECRET)
    for value in values:
        for part in re.split(r"[,\s]+(?=[A-Za-z][A-Za-z0-9+.\-]*://)", str(value)):
            candidates = [parse_url(part)]
            if not _SCHEME_START.match(part.strip()) and any(c in part for c in _ATS):
                candidates.append(parse_url("x://" + part.strip()))  # HOST:PORT lists with userinfo
            for address in candidates:
                for secret in (address.password, address.query_value("password")):
                    if secret and len(secret) >= _MIN_SECRET:
                        _SECRETS.add(secret)
            for match in _SECRET_VALUE.finditer(part):  # key=value secrets in any other form
                secret = part[match.end(1) : match.end()].strip("'")
                if len(secret) >= _MIN_SECRET:
                    _SECRETS.add(secret)


def _redact_urls(text: str) -> str:
    """Every URL's password hidden. A URL's userinfo runs to the last ``@`` (or full-width ``＠``)
    before the line ends or the next URL starts, when a host follows it: a password with a space or
    a quote in it is hidden whole (over-redacting is the safe side)."""
    starts = [m.start() for m in _SCHEME_START.finditer(text)]
    if not starts:
        return text
    pieces = [text[: starts[0]]]
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        newline = text.find("\n", start, end)
        segment_end = newline if newline != -1 else end
        pieces.append(_redact_segment(text[start:segment_end]) + text[segment_end:end])
    return "".join(pieces)


def _redact_segment(segment: str) -> str:
    scheme, _, rest = segment.partition("://")
    at = _last_at(rest, len(rest))
    while at > 0 and not _HOST_AFTER.match(rest, at + 1):
        at = _last_at(rest, at)
    if at <= 0:  # no userinfo: the URL alone, up to a space or a quote
        return _URL.sub(lambda m: _redact_url(m.group(0)), segment)
    userinfo, host = rest[:at], rest[at + 1 :]
    if not any(c in userinfo for c in ":/'\"") and not any(c.isspace() for c in userinfo):
        return f"{scheme}://{userinfo}@{host}"  # a user name only (postgresql://user@host): nothing secret
    user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
    if any(c.isspace() or c in "'\"/" for c in user):
        user = ""
    return f"{scheme}://{user}:***@{host}"


def _last_at(text: str, end: int) -> int:
    return max(text.rfind(c, 0, end) for c in _ATS)


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
