"""Every server address a user gives, parsed by one function that never raises.

Addresses reach lockcompare as URLs (``redis://:pw@127.0.0.1:6379/0``, ``http://etcd:2379``,
``postgresql://u@[::1]:5432/db``) or as a libpq keyword string (``host=db port=5432 password=pw``).
urllib's parsers raise on what users really type: a full-width ``＠`` in a password (``ValueError:
... NFKC normalization``), an unclosed bracket (``Invalid IPv6 URL``); redis-py's ``from_url``
calls them, and so every such address was a traceback (issue 38). :func:`parse_url` takes any text
and returns an :class:`Address` whose ``problem`` says, without the password, what is wrong; the
servers' modules (infra/) ask it for host, port and password and rebuild the text a library
needs with :meth:`Address.to_url`.

The password ends at the *last* ``@`` of the authority (a ``/``, ``@`` or ``＠`` inside a password
is then part of it), as redaction.py hides it; no scheme is named here.

>>> a = parse_url("redis://:a＠b@[::1]:6379/0")
>>> (a.password, a.host, a.port, a.path, a.problem)
('a＠b', '::1', 6379, '/0', '')
>>> parse_url("host=127.0.0.1 port=5432 user=u password='a b' dbname=x").to_url(scheme="postgresql")
'postgresql://u:a%20b@127.0.0.1:5432/x'
>>> parse_url("redis://127.0.0.1:port/0").problem
'bad port'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from urllib.parse import quote, unquote

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_KEYWORD_START = re.compile(r"^\s*[A-Za-z_]+\s*=")
_KEYWORD = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|'(?:[^'\\]|\\.)*$|\S*)")


@dataclass(frozen=True, kw_only=True)
class Address:
    """A parsed address. ``problem`` is "" for a usable one, else one phrase without the password."""

    scheme: str = ""
    user: str = ""
    #: None: no password given (not even an empty one).
    password: str | None = None
    #: Without brackets (``::1``).
    host: str = ""
    port: int | None = None
    path: str = ""
    query: str = ""
    fragment: str = ""
    #: A keyword string's other pairs (``sslmode=disable``), in order.
    keywords: tuple[tuple[str, str], ...] = ()
    problem: str = ""

    @property
    def has_userinfo(self) -> bool:
        return bool(self.user) or self.password is not None

    @property
    def host_text(self) -> str:
        """The host as a URL writes it (an IPv6 address in brackets)."""
        return f"[{self.host}]" if ":" in self.host else self.host

    def query_value(self, name: str) -> str | None:
        """The (decoded) value of ``name`` in the query, or in a keyword string's pairs."""
        for key, value in self.keywords:
            if key == name:
                return value
        for part in self.query.split("&"):
            key, sep, value = part.partition("=")
            if sep and unquote(key) == name:
                return unquote(value)
        return None

    def to_url(
        self,
        *,
        scheme: str | None = None,
        host: str | None = None,
        port: int | None = None,
        query: str | None = None,
        userinfo: bool = True,
    ) -> str:
        """The address as URL text a library parses (user and password percent-encoded, so a
        full-width or reserved character reaches the server as given); keyword pairs become the query."""
        where = replace(
            self, host=host if host is not None else self.host, port=port if port is not None else self.port
        )
        text = f"{scheme or self.scheme}://"
        if userinfo and self.has_userinfo:
            text += quote(self.user, safe="")
            if self.password is not None:
                text += ":" + quote(self.password, safe="")
            text += "@"
        text += where.host_text + (f":{where.port}" if where.port is not None else "") + self.path
        q = query if query is not None else self.query
        if query is None and self.keywords:
            q = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in self.keywords)
        if q:
            text += "?" + q
        if self.fragment:
            text += "#" + self.fragment
        return text


def parse_url(text: str) -> Address:
    """``text`` (a URL, or a libpq keyword string) as an :class:`Address`; never raises."""
    text = str(text).strip()
    if not _SCHEME.match(text):
        if _KEYWORD_START.match(text):
            return _parse_keywords(text)
        return Address(problem="not a URL (expected SCHEME://HOST:PORT...)")
    scheme, rest = text.split("://", 1)
    path_start = re.search(r"[/?#]", rest)
    if rest.startswith("/"):  # unix:///path: no authority
        authority, tail = "", rest
    elif "@" in rest:
        userinfo, _, after = rest.rpartition("@")
        end = re.search(r"[/?#]", after)
        cut = end.start() if end else len(after)
        authority, tail = userinfo + "@" + after[:cut], after[cut:]
    else:
        cut = path_start.start() if path_start else len(rest)
        authority, tail = rest[:cut], rest[cut:]
    tail, _, fragment = tail.partition("#")
    path, _, query = tail.partition("?")
    address = Address(scheme=scheme.lower(), path=path, query=query, fragment=fragment)
    userinfo, at, hostport = authority.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        address = replace(address, user=unquote(user), password=unquote(password) if colon else None)
    if not authority and rest.startswith("/"):
        return address  # a socket path, no host (unix:///tmp/redis.sock)
    return _with_host_port(address, hostport)


def _with_host_port(address: Address, hostport: str) -> Address:
    if not hostport:
        return replace(address, problem="no host")
    if any(c in hostport for c in "\uff20\ufe6b"):  # NFKC makes it an @: say so, not "bad port"
        return replace(address, problem="a full-width @ where the @ before the host belongs")
    if hostport.startswith("["):
        host, bracket, after = hostport[1:].partition("]")
        if not bracket or not host:
            return replace(address, problem="an IPv6 address needs its closing bracket: [::1]:PORT")
        if after and not after.startswith(":"):
            return replace(address, host=host, problem="bad port")
        colon, port_text = after[:1], after[1:]
    else:
        if hostport.count(":") > 1:
            return replace(address, problem="an IPv6 address goes in brackets: [::1]:PORT")
        host, colon, port_text = hostport.partition(":")
        if not host or any(c.isspace() for c in host) or "[" in host or "]" in host:
            return replace(address, host=host, problem="bad host name")
        problem = _name_problem(host)
        if problem:
            return replace(address, problem=problem)
    address = replace(address, host=host)
    if colon:
        if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
            return replace(address, problem="bad port")
        address = replace(address, port=int(port_text))
    return address


#: DNS's limits (RFC 1035): what getaddrinfo's IDNA encoding refuses with a UnicodeError.
MAX_HOST_CHARS = 253
MAX_LABEL_CHARS = 63


def _name_problem(host: str) -> str:
    """Why ``host`` cannot be looked up ("" if it can): too long, a label too long or empty, or a
    name IDNA cannot encode (the socket module encodes every name so, and raised UnicodeError from
    deep in a library: a traceback, issue 49).

    >>> _name_problem("a" * 64 + ".example")
    'a host name label longer than 63 characters'
    >>> _name_problem("db..example"), _name_problem("db.example."), _name_problem("bücher.example")
    ('bad host name (an empty label)', '', '')
    """
    name = host[:-1] if host.endswith(".") else host
    if len(name) > MAX_HOST_CHARS:
        return f"a host name longer than {MAX_HOST_CHARS} characters"
    labels = name.split(".")
    if any(len(label) > MAX_LABEL_CHARS for label in labels):
        return f"a host name label longer than {MAX_LABEL_CHARS} characters"
    if not all(labels):
        return "bad host name (an empty label)"
    try:
        host.encode("idna")
    except UnicodeError:
        return "bad host name (not encodable as IDNA)"
    return ""


def _parse_keywords(text: str) -> Address:
    """A libpq keyword string (``key=value`` pairs, values quoted with ``'`` and ``\\``-escapes)."""
    pairs: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        match = _KEYWORD.match(text, position)
        if match is None or match.end() == position:
            if text[position:].strip():
                return Address(problem="not a keyword string (expected key=value pairs)")
            break
        value = match.group(2)
        if value.startswith("'"):
            if len(value) < 2 or not value.endswith("'") or (value.endswith("\\'") and not value.endswith("\\\\'")):
                return Address(problem="a quoted value is not closed")
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        pairs.append((match.group(1).lower(), value))
        position = match.end()
    found = dict(pairs)
    rest = tuple((k, v) for k, v in pairs if k not in ("host", "hostaddr", "port", "user", "password", "dbname"))
    address = Address(
        user=found.get("user", ""),
        password=found.get("password"),
        path=f"/{found['dbname']}" if "dbname" in found else "",
        keywords=rest,
    )
    host = found.get("host") or found.get("hostaddr") or ""
    if not host:
        return replace(address, problem="no host")
    address = replace(address, host=host)
    port = found.get("port", "")
    if port:
        if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            return replace(address, problem="bad port")
        address = replace(address, port=int(port))
    return address
