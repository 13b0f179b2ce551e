"""`lockcompare clients install|list`: the shipped lock clients in other languages (Node, Go, Java),
installed where lockcompare finds them (backends/external/install.py and locate.py do the work)."""

from __future__ import annotations

from typing import Annotated

import typer

from lockcompare.cli.core import app

clients_app = typer.Typer(
    no_args_is_help=True,
    help="The shipped lock clients in other languages: install them here, or list where they are found.",
)
app.add_typer(clients_app, name="clients")

SHIPPED_MODULE = "lockcompare.backends.external.shipped:"


@clients_app.command("install")
def install(
    only: Annotated[
        list[str] | None,
        typer.Argument(metavar="[CLIENT]...", help="node, go, java, python (default: all of them)."),
    ] = None,
) -> None:
    """Copy the shipped clients where lockcompare finds them (the per-user cache unless
    $LOCKCOMPARE_CLIENTS_DIR is set or lockcompare runs from a checkout), run `npm ci` for Node and
    build the Go and Java clients where their toolchains exist. One line per client."""
    from lockcompare.backends.external.install import install_clients
    from lockcompare.infra.provenance import source_revision

    target, origin, steps = install_clients(only=only or (), revision=source_revision())
    typer.echo(f"clients: {target} ({origin})")
    for step in steps:
        typer.echo(step.line())
    if any(step.status == "failed" for step in steps):
        raise typer.Exit(1)


@clients_app.command("list")
def list_clients() -> None:
    """Where the shipped clients are found, and whether each is usable here (and if not, why)."""
    from lockcompare.backends import describe_backends
    from lockcompare.backends.external import manifest_backend
    from lockcompare.backends.external.locate import locate
    from lockcompare.errors import BackendError

    where = locate()
    typer.echo(f"clients: {where.directory} ({where.origin})")
    for info in describe_backends():
        if info.target.startswith(SHIPPED_MODULE):
            typer.echo(f"{info.name:<26} {'NOT VIABLE: ' + info.problem if info.problem else 'viable'}")
    reference = where.directory / "python" / "refclient.toml"
    if not where.problem and reference.is_file():
        try:
            manifest_backend(str(reference)).check_viable()
            state = f"viable (--backend {reference})"
        except BackendError as exc:
            state = f"NOT VIABLE: {exc}"
        typer.echo(f"{'python-refclient':<26} {state}")
