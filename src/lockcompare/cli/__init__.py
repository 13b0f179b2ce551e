"""The command line: a thin typer layer over plain functions (run_trial, run_matrix, render, ...).

core.py holds the app and its one-line error handling, options.py the options `run` and `matrix`
share; each other module is one group of commands.
"""

import sys

try:
    from lockcompare.cli import catalogue, clients, explore, measure, results  # noqa: F401  (registers the commands)
    from lockcompare.cli.core import app
except KeyboardInterrupt:  # a Ctrl-C while the command is still importing: one line, no traceback
    print("lockcompare: interrupted", file=sys.stderr)
    sys.exit(130)


def main() -> None:
    app()


__all__ = ["app", "main"]
