"""``run --from``: one recorded trial run again with exactly its settings and seed, its verdict
printed beside the recorded one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from lockcompare.analysis.results import read_results
from lockcompare.cli.core import err
from lockcompare.cli.trial_output import fail_on_unknown, kept_results, say, where_kept
from lockcompare.errors import InvalidValueError

if TYPE_CHECKING:
    from lockcompare.runner.plan import ClusterOptions


#: Options ``run --from`` accepts beside the row: where to write, where the servers are and which kind.
RERUN_OPTIONS = {
    "server",
    "from_row",
    "out_path",
    "nodes",
    "nodes_file",
    "resource",
    "redis_server",
    "postgres",
    "zookeeper",
    "lock_servers",
}  # --faults-file: a setting


def run_from(source: str, *, out_path: Path | None, options: ClusterOptions, server: str | None) -> None:
    """Rerun the trial ``FILE:ROW`` names and print its verdict beside the recorded one."""
    from lockcompare.analysis.reproduce import find_row, spec_from_row
    from lockcompare.runner.matrix import run_planned
    from lockcompare.runner.plan import rerun_server

    path_text, sep, selector = source.rpartition(":")
    if not sep or not path_text or not selector:
        raise InvalidValueError(f"--from takes RESULTS.csv:ROW (a trial id or a row number), got {source!r}")
    original = find_row(read_results(Path(path_text)), selector)
    recorded = spec_from_row(original)  # exactly the row's trial (its id checked)
    external = options.lock_servers.shared() is not None
    spec = rerun_server(recorded, choice=server, binary=options.redis_server, external=external)
    if original.get("cluster") == "external" and not external:
        err.print("note: the row ran against external servers; this rerun uses the embedded cluster")
    if spec.server != recorded.server:
        say(
            f"note: the row ran on {recorded.server}; this rerun runs on {spec.server}: another trial "
            f"({spec.trial_id}), its verdict beside the recorded one"
        )
    with kept_results(out_path) as target:
        report = run_planned([spec], out=target, cluster_options=options, resume=out_path is not None)
    (row,) = [r for r in read_results(target) if r["trial_id"] == spec.trial_id][-1:]
    typer.echo(f"{'trial_id':>24}: {spec.trial_id}")
    for key in ("verdict", "conflicts", "lost_updates", "entries", "writes_rejected"):
        same = "" if str(row[key]) == str(original[key]) else "   (differs)"
        typer.echo(f"{key:>24}: {row[key]}   recorded: {original[key]}{same}")
    typer.echo(f"{'recorded by':>24}: run {original['run_id']}, lockcompare {original['lockcompare_version']}, "
               f"revision {original['source_revision'] or '?'}")  # fmt: skip
    where_kept(target, row)
    fail_on_unknown(report)
