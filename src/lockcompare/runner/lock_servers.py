"""The user's lock servers: ``--lock-servers KIND=URL[,URL...]`` for any kind, one value.

``--nodes`` (and ``--nodes-file``), ``--postgres`` and ``--zookeeper`` are its aliases: each gives
the same :class:`LockServers` as ``--lock-servers redis=...``, ``postgres=...`` or ``zookeeper=...``.
The value is kept by protocol (what the servers' clients speak, :attr:`ServerKind.speaks`): a
backend's ``servers`` names a protocol, and every question the plan and the executor ask is "are
this backend's lock nodes the user's?". The kind named on the command line answers the rest: its
``owns`` checks the URLs. How the runner uses the user's servers of a protocol is one row of
:data:`ROUTES`; a protocol without a row runs only on servers lockcompare starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from lockcompare.errors import InvalidValueError
from lockcompare.infra.kinds import (
    POSTGRES_PROTOCOL,
    REDIS_PROTOCOL,
    ZOOKEEPER_PROTOCOL,
    ServerKind,
    kind_speaking,
    registered,
)
from lockcompare.redaction import shown

FLAG = "--lock-servers"


@dataclass(frozen=True, kw_only=True)
class Route:
    """How the runner uses the user's lock servers of one protocol."""

    #: The older option that names them (an alias of ``--lock-servers KIND=...``).
    alias: str
    #: What they are used for, in ``--help``'s and the refusals' words.
    use: str
    #: They are every trial's cluster (with ``--resource``), not only the trials on this protocol.
    shared: bool = False
    #: Trials on them run beside a shared cluster (infra/pool.py WithPostgres hands them out).
    beside_shared: bool = False
    #: The resource lives on them too (the trials' ``--resource-kind`` must be their protocol).
    holds_resource: bool = False
    #: How many servers one run takes (None: any number).
    most: int | None = None


#: The protocols whose servers the user can give, and how each is used (runner/matrix.py
#: ``_cluster_source`` builds the clusters this table describes).
ROUTES: dict[str, Route] = {
    REDIS_PROTOCOL: Route(alias="--nodes", use="every trial's lock nodes, with --resource", shared=True),
    POSTGRES_PROTOCOL: Route(
        alias="--postgres",
        use="the lock and the resource of the backends on it",
        beside_shared=True,
        holds_resource=True,
        most=1,
    ),
    ZOOKEEPER_PROTOCOL: Route(alias="--zookeeper", use="the lock nodes of the backends on it"),
}


@dataclass(frozen=True)
class LockServers:
    """The user's lock servers by protocol: ((protocol, URLs), ...) in protocol order; empty: none
    (lockcompare starts every server)."""

    by_protocol: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.by_protocol)

    def urls_for(self, protocol: str) -> tuple[str, ...] | None:
        """The user's servers of ``protocol`` (None: lockcompare starts them)."""
        return dict(self.by_protocol).get(protocol)

    def own(self, protocol: str) -> tuple[str, ...] | None:
        """The user's servers of ``protocol`` where they serve only the backends on it (not the shared
        Redis-protocol nodes, which are every trial's cluster), None otherwise."""
        urls = self.urls_for(protocol)
        return None if urls is None or ROUTES[protocol].shared else urls

    def protocols(self) -> tuple[str, ...]:
        return tuple(protocol for protocol, _ in self.by_protocol)

    def shared(self) -> tuple[str, ...] | None:
        """The servers every trial runs on (the Redis-protocol nodes given with ``--resource``), or None."""
        shared = [urls for protocol, urls in self.by_protocol if ROUTES[protocol].shared]
        return shared[0] if shared else None

    def adding(self, protocol: str, urls: Sequence[str], *, given: str = FLAG) -> LockServers:
        """These servers and ``urls`` as ``protocol``'s; one line when ``protocol``'s are given twice."""
        if protocol not in ROUTES:
            raise InvalidValueError(refusal(protocol))
        if self.urls_for(protocol) is not None:
            raise InvalidValueError(
                f"{given}: {protocol}-protocol lock servers are given already (by {FLAG} or "
                f"{ROUTES[protocol].alias}): give them once"
            )
        # In protocol order, however they were given: --nodes X --postgres Y is the same value as
        # --lock-servers postgres=Y --lock-servers redis=X.
        return LockServers(tuple(sorted((*self.by_protocol, (protocol, tuple(urls))))))


#: No lock servers of the user's: lockcompare starts every server.
NO_LOCK_SERVERS = LockServers()


def refusal(protocol: str) -> str:
    """Why the user's servers of ``protocol`` cannot be lock nodes (lockcompare starts them itself)."""
    takes = ", ".join(name for name, kind in registered().items() if kind.speaks in ROUTES)
    return f"{FLAG}: lockcompare starts {protocol} lock servers itself (the user's servers are taken for: {takes})"


def lock_servers_from(
    *,
    texts: Iterable[str] = (),
    nodes: str | None = None,
    postgres: str | None = None,
    zookeeper: str | None = None,
) -> LockServers:
    """The one value behind ``--lock-servers KIND=URL[,URL...]`` (``texts``, the option repeated)
    and its aliases ``--nodes``, ``--postgres`` and ``--zookeeper`` (the texts as typed)."""
    servers = NO_LOCK_SERVERS
    for text in texts:
        kind, urls = _kind_and_urls(text)
        servers = servers.adding(kind.speaks, _completed(kind, urls, flag=f"{FLAG} {kind.name}"))
    aliases = ((REDIS_PROTOCOL, nodes), (POSTGRES_PROTOCOL, postgres), (ZOOKEEPER_PROTOCOL, zookeeper))
    for protocol, typed in aliases:
        if typed is None:
            continue
        speaker = kind_speaking(protocol)
        if speaker is None:  # an installation without the kind: what --lock-servers would say
            raise InvalidValueError(f"{ROUTES[protocol].alias}: no installed server kind speaks {protocol!r}")
        completed = _completed(speaker, [typed], flag=ROUTES[protocol].alias)
        servers = servers.adding(protocol, completed, given=ROUTES[protocol].alias)
    return servers


def _kind_and_urls(text: str) -> tuple[ServerKind, list[str]]:
    """``KIND=URL[,URL...]`` as (the kind, its URLs), each URL one the kind owns; one line otherwise."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    kinds = registered()
    if not sep or not name or "://" in name:  # a URL with no KIND= (a "=" in its password is no KIND)
        raise InvalidValueError(f"{FLAG} takes KIND=URL[,URL...] (KIND: {', '.join(kinds)}), got {shown(text)!r}")
    if name not in kinds:
        raise InvalidValueError(f"{FLAG}: unknown server kind {shown(name)!r} (known: {', '.join(kinds)})")
    kind = kinds[name]
    urls = [part.strip() for part in rest.split(",") if part.strip()]
    if not urls:
        raise InvalidValueError(f"{FLAG} {name}=: no URL given ({name}=URL[,URL...])")
    for url in urls:
        _check_owned(kind, url, flag=f"{FLAG} {name}")
    return kind, urls


def _check_owned(kind: ServerKind, url: str, *, flag: str) -> None:
    if kind.owns(url):
        return
    owners = [other.name for other in registered().values() if other.owns(url)]
    whose = f": a {owners[0]} server's URL" if owners else ""
    raise InvalidValueError(f"{flag}: {shown(url)!r} is not a {kind.name} server's URL{whose}")


def _completed(kind: ServerKind, texts: Sequence[str], *, flag: str) -> tuple[str, ...]:
    """``texts`` (URLs, or an alias's text) as the URLs the runner uses, checked by the protocol's own
    parser (a password from the environment, a libpq keyword string, HOST:PORT) and the kind."""
    if kind.speaks not in ROUTES:
        raise InvalidValueError(refusal(kind.speaks))
    alias = ROUTES[kind.speaks].alias
    try:
        urls = _COMPLETE[kind.speaks](texts, flag)
    except InvalidValueError as exc:  # a protocol's parser names its older option: say the one given
        said = str(exc)
        if flag != alias and said.startswith(f"{alias} "):
            raise InvalidValueError(flag + said.removeprefix(alias)) from None
        raise
    most = ROUTES[kind.speaks].most
    if most is not None and len(urls) > most:
        raise InvalidValueError(f"{flag}: one {kind.name} server ({ROUTES[kind.speaks].use}), got {len(urls)}")
    for url in urls:
        _check_owned(kind, url, flag=flag)
    return urls


def _redis_urls(texts: Sequence[str], flag: str) -> tuple[str, ...]:
    from lockcompare.infra.redisconn import parse_url_list, with_env_password
    from lockcompare.scenario.limits import check_count

    urls = tuple(with_env_password(u) for u in parse_url_list(",".join(texts)))
    check_count("nodes", len(urls), flag=f"{flag} (count)")
    return urls


def _postgres_urls(texts: Sequence[str], _flag: str) -> tuple[str, ...]:
    from lockcompare.infra.pg_client import postgres_url  # a URL or a libpq keyword string (issue 38)

    return tuple(postgres_url(text) for text in texts)


def _zookeeper_urls(texts: Sequence[str], _flag: str) -> tuple[str, ...]:
    from lockcompare.infra.zookeeper_server import zookeeper_urls  # zk://HOST:PORT, or HOST:PORT for --zookeeper

    return zookeeper_urls(",".join(texts))


#: Each protocol's own parser of its servers' addresses.
_COMPLETE: dict[str, Callable[[Sequence[str], str], tuple[str, ...]]] = {
    REDIS_PROTOCOL: _redis_urls,
    POSTGRES_PROTOCOL: _postgres_urls,
    ZOOKEEPER_PROTOCOL: _zookeeper_urls,
}
