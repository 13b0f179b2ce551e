"""The command line: a thin typer layer over plain functions (run_trial, run_matrix, render, ...).

core.py holds the app and its one-line error handling, options.py the options `run` and `matrix`
share; each other module is one group of commands.
"""

from lockcompare.cli import catalogue, clients, explore, measure, results  # noqa: F401  (registers the commands)
from lockcompare.cli.core import app


def main() -> None:
    """The command line, without the early signal answers of the ``lockcompare`` command
    (lockcompare/__main__.py): for callers that run it inside a program of their own."""
    app()


__all__ = ["app", "main"]
