"""The user's lock servers: ``--lock-servers KIND=URL[,URL...]`` for any kind, one value.

``--nodes`` (and ``--nodes-file``), ``--postgres`` and ``--zookeeper`` are its aliases: each gives
the same :class:`LockServers` as ``--lock-servers redis=...``, ``postgres=...`` or ``zookeeper=...``.
The value is kept by protocol (what the servers' clients speak, :attr:`ServerKind.speaks`): a
backend's ``servers`` names a protocol, and every question the plan and the executor ask is "are
this backend's lock nodes the user's?". The kind named on the command line answers the rest: its
``owns`` checks the URLs. How the runner uses the user's servers of a protocol, the protocol's kind
declares (:func:`routes`, ``Capabilities.user_servers``); a protocol whose kind declares nothing runs
only on servers lockcompare starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lockcompare.errors import InvalidValueError
from lockcompare.infra.kinds import ServerKind, UserServers, kind_speaking, registered
from lockcompare.redaction import shown

FLAG = "--lock-servers"

#: How the runner uses the user's lock servers of one protocol: what its kind declares.
Route = UserServers


def routes() -> dict[str, Route]:
    """The protocols whose servers the user can give, and how each is used, as the protocol's first
    kind (its namesake: redis before valkey) declares (``Capabilities.user_servers``;
    runner/cluster_source.py builds the clusters this describes)."""
    found: dict[str, Route] = {}
    for kind in registered().values():
        if kind.capabilities.user_servers is not None:
            found.setdefault(kind.speaks, kind.capabilities.user_servers)
    return found


def protocol_of_alias(alias: str) -> str | None:
    """The protocol whose servers an older option (``--nodes``, ``--postgres``, ...) gives, None when
    no installed kind declares it."""
    return next((protocol for protocol, route in routes().items() if route.alias == alias), None)


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
        return None if urls is None or routes()[protocol].shared else urls

    def protocols(self) -> tuple[str, ...]:
        return tuple(protocol for protocol, _ in self.by_protocol)

    def shared(self) -> tuple[str, ...] | None:
        """The servers every trial runs on (the Redis-protocol nodes given with ``--resource``), or None."""
        shared = [urls for protocol, urls in self.by_protocol if routes()[protocol].shared]
        return shared[0] if shared else None

    def beside_shared(self) -> tuple[str, ...] | None:
        """The user's servers that serve the trials on their protocol beside the shared cluster (a
        PostgreSQL server: the lock and the resource of the backends on it), or None."""
        beside = [urls for protocol, urls in self.by_protocol if routes()[protocol].beside_shared]
        return beside[0] if beside else None

    def pooled(self, protocol: str) -> tuple[str, ...] | None:
        """The user's servers of ``protocol`` when they are the lock nodes of the pool's clusters of
        that protocol (a ZooKeeper ensemble: a resource of ours beside them), None otherwise."""
        urls = self.urls_for(protocol)
        route = routes().get(protocol)
        return None if urls is None or route is None or route.shared or route.beside_shared else urls

    def by_alias(self, alias: str) -> tuple[str, ...] | None:
        """The user's servers of the protocol whose older option is ``alias`` (``--nodes``, ...)."""
        protocol = protocol_of_alias(alias)
        return None if protocol is None else self.urls_for(protocol)

    def adding(self, protocol: str, urls: Sequence[str], *, given: str = FLAG) -> LockServers:
        """These servers and ``urls`` as ``protocol``'s; one line when ``protocol``'s are given twice."""
        route = routes().get(protocol)
        if route is None:
            raise InvalidValueError(refusal(protocol))
        if self.urls_for(protocol) is not None:
            raise InvalidValueError(
                f"{given}: {protocol}-protocol lock servers are given already (by {FLAG} or {route.alias}): "
                "give them once"
            )
        # In protocol order, however they were given: --nodes X --postgres Y is the same value as
        # --lock-servers postgres=Y --lock-servers redis=X.
        return LockServers(tuple(sorted((*self.by_protocol, (protocol, tuple(urls))))))


#: No lock servers of the user's: lockcompare starts every server.
NO_LOCK_SERVERS = LockServers()


def refusal(protocol: str) -> str:
    """Why the user's servers of ``protocol`` cannot be lock nodes (lockcompare starts them itself)."""
    takes = ", ".join(name for name, kind in registered().items() if kind.speaks in routes())
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
    for alias, typed in (("--nodes", nodes), ("--postgres", postgres), ("--zookeeper", zookeeper)):
        if typed is None:
            continue
        protocol = protocol_of_alias(alias)
        speaker = None if protocol is None else kind_speaking(protocol)
        if protocol is None or speaker is None:  # an installation without the kind
            raise InvalidValueError(f"{alias}: no installed server kind takes it (see {FLAG} KIND=URL)")
        servers = servers.adding(protocol, _completed(speaker, [typed], flag=alias), given=alias)
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
    route = routes().get(kind.speaks)
    if route is None:
        raise InvalidValueError(refusal(kind.speaks))
    try:
        urls = route.parse(texts, flag)
    except InvalidValueError as exc:  # a protocol's parser names its older option: say the one given
        said = str(exc)
        if flag != route.alias and said.startswith(f"{route.alias} "):
            raise InvalidValueError(flag + said.removeprefix(route.alias)) from None
        raise
    if route.shared:  # every trial's lock nodes: bounded as the embedded ones are
        from lockcompare.scenario.limits import check_count

        check_count("nodes", len(urls), flag=f"{flag} (count)")
    if route.most is not None and len(urls) > route.most:
        raise InvalidValueError(f"{flag}: one {kind.name} server ({route.use}), got {len(urls)}")
    for url in urls:
        _check_owned(kind, url, flag=flag)
    return urls
