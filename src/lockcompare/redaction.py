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

And every password the command was given (:func:`remember_secrets`) wherever it appears, whole or
in the pieces a server-list parser cuts it into (a ``,`` or ``=`` in a password splits
``--nodes``/``--lock-servers``, issue 49); a URL cut right after its ``://:`` is a password's start:

>>> redact("bad redis URL (bad host name): 'redis://:SECa'")
"bad redis URL (bad host name): 'redis://:***'"

Every pattern here runs in time linear in the text: a URL is found by its ``://`` and its scheme
read backwards (a regex searching for ``scheme://`` from every position of a long run of letters
was quadratic: a 100 KB argument hung for over 30 s, issue 49).
"""

from __future__ import annotations

import itertools
import re

#: Where a URL in text ends: white space or a quote.
_URL_END = re.compile(r"[\s'\"<>`]")
#: The characters of a scheme after its first letter (RFC 3986).
_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
#: ``@`` and the characters NFKC turns into it (a full-width ``＠`` is an ``@`` to some parsers).
_ATS = "@\uff20\ufe6b"
#: A userinfo's ``@`` and the host after it (a name, an address or a bracketed IPv6 address), as
#: read in the reversed text: the first match there is the last ``@`` of the original.
_AT_BEFORE_HOST_REVERSED = re.compile(r"(?:[\w.\-]|\][0-9A-Fa-f:.%\w]*\[)[@\uff20\ufe6b]")
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
#: Where a server-list parser may cut a password: its pieces are hidden as the password is.
_CUTS = re.compile(r"[\s,=/@:?#;&'\"\uff20\ufe6b]+")


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


def shown(text: str, *, most: int = 160) -> str:
    """``text`` as a message quotes it: redacted, and past ``most`` characters cut, its length said
    (a 100 KB argument is not echoed whole).

    >>> shown("redis://:pw@" + "a" * 300 + ":1/0", most=40)
    'redis://:***@aaaaaaaaaaaaa... (317 characters)'
    """
    text = redact(text)
    return text if len(text) <= most else f"{text[: most * 2 // 3]}... ({len(text)} characters)"


def remember_secrets(values: list[str] | tuple[str, ...], *, passwords: tuple[str, ...] = ()) -> None:
    """Note the passwords inside ``values`` (a command line's arguments) and the ``passwords``
    themselves (an environment variable's): :func:`redact` then hides each of them wherever it
    appears, whatever form carried it."""
    from lockcompare.urls import parse_url  # small, no dependency: a cycle-free late import

    for password in passwords:
        _remember(password)
    for value in values:
        for part in _url_pieces(str(value)):
            candidates = [parse_url(part)]
            if not url_starts(part.strip()) and any(c in part for c in _ATS):
                candidates.append(parse_url("x://" + part.strip()))  # HOST:PORT lists with userinfo
            for address in candidates:
                for secret in (address.password, address.query_value("password")):
                    _remember(secret or "")
            for match in _SECRET_VALUE.finditer(part):  # key=value secrets in any other form
                _remember(part[match.end(1) : match.end()].strip("'"))


def _remember(secret: str) -> None:
    """Hide ``secret`` from now on, and each piece of it a server-list parser could cut out."""
    if len(secret) >= _MIN_SECRET:
        _SECRETS.add(secret)
        _SECRETS.update(piece for piece in _CUTS.split(secret) if len(piece) >= _MIN_SECRET)


def url_starts(text: str) -> list[int]:
    """Where each URL of ``text`` starts (its scheme's first letter), in linear time: each ``://``
    is found by ``str.find`` and its scheme read backwards, and no character is read twice (a
    scheme holds no ``:``, so no backward walk crosses an earlier ``://``).

    >>> url_starts("see redis://h:1 and 9http://x, not ://y")
    [4, 21]
    """
    starts: list[int] = []
    at = text.find("://")
    while at != -1:
        first = at
        while first > 0 and text[first - 1] in _SCHEME_CHARS:
            first -= 1
        while first < at and not (text[first].isascii() and text[first].isalpha()):
            first += 1  # a scheme starts with a letter: digits, "+", "." and "-" before one are not its
        if first < at:
            starts.append(first)
        at = text.find("://", at + 3)
    return starts


def _url_pieces(value: str) -> list[str]:
    """``value`` cut before each URL it holds (a server list, ``KIND=URL,URL``), the separators
    between them dropped; the text before the first URL is a piece of its own."""
    starts = url_starts(value)
    if not starts:
        return [value]
    bounds = [0, *starts, len(value)]
    return [value[a:b].rstrip(", \t\n") for a, b in itertools.pairwise(bounds) if value[a:b].strip()]


def _redact_urls(text: str) -> str:
    """Every URL's password hidden. A URL's userinfo runs to the last ``@`` (or full-width ``＠``)
    before the line ends or the next URL starts, when a host follows it: a password with a space or
    a quote in it is hidden whole (over-redacting is the safe side)."""
    if "://:" not in text and not any(c in text for c in _ATS):
        return text  # no userinfo anywhere: nothing to hide (and nothing to walk through)
    starts = url_starts(text)
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
    at = _last_at_before_a_host(rest)
    if at <= 0:  # no userinfo: the URL alone, up to a space or a quote
        end = _URL_END.search(segment)
        cut = end.start() if end else len(segment)
        return _redact_url(segment[:cut]) + segment[cut:]
    userinfo, host = rest[:at], rest[at + 1 :]
    if not any(c in userinfo for c in ":/'\"") and not any(c.isspace() for c in userinfo):
        return f"{scheme}://{userinfo}@{host}"  # a user name only (postgresql://user@host): nothing secret
    user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
    if any(c.isspace() or c in "'\"/" for c in user):
        user = ""
    return f"{scheme}://{user}:***@{host}"


def _last_at_before_a_host(text: str) -> int:
    """The index of the last ``@`` (or full-width ``＠``) that a host follows, -1 if none: one search
    of the reversed text (a loop over the ``@`` from the end was quadratic in ``@@@...``)."""
    found = _AT_BEFORE_HOST_REVERSED.search(text[::-1])
    return len(text) - found.end() if found else -1


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
        if rest.startswith(":") and not rest[1:].split("/", 1)[0].isdigit():
            return f"{scheme}://:***"  # a password cut from its host (a "," in it split a list)
        return url
    userinfo, _, host = rest.rpartition("@")
    if ":" not in userinfo and "/" not in userinfo:
        return url  # a user name only (postgresql://user@host): nothing secret
    user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
    return f"{scheme}://{user}:***@{host}"
