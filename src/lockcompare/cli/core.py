"""The typer app every command hangs on, and how it turns every failure into one line.

Every error a user can cause ends as one line on stderr and a non-zero exit code: lockcompare's
own errors (see errors.py), click's usage errors, and Ctrl-C (exit 130, servers stopped).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from lockcompare import interrupts
from lockcompare.errors import LockcompareError, Terminated
from lockcompare.redaction import redact, remember_secrets

err = Console(stderr=True)


class _OneLineLog(logging.Handler):
    """lockcompare's warnings (a node restarted, another run active, a file upgraded) as one
    ``lockcompare: warning: ...`` line each on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        message = redact(record.getMessage())  # a warning may quote a server's URL
        print(f"lockcompare: {record.levelname.lower()}: {message}", file=sys.stderr, flush=True)


def _setup_logging() -> None:
    logger = logging.getLogger("lockcompare")
    if not any(isinstance(h, _OneLineLog) for h in logger.handlers):
        logger.addHandler(_OneLineLog(level=logging.WARNING))
    logger.setLevel(logging.WARNING)
    logger.propagate = False


@contextlib.contextmanager
def _whole_command() -> Iterator[None]:
    """What every command does, whatever it is: sweep the temporary directories a SIGKILLed run left
    (even a ``--resume`` with nothing to do makes none of its own, issue 38), and end on SIGTERM,
    SIGHUP or SIGQUIT as on Ctrl-C: one line, everything stopped, exit 128+N."""
    from lockcompare.infra.lifecycle import remove_orphaned_dirs, sigterm_unwinds

    remove_orphaned_dirs()
    with sigterm_unwinds():
        yield


#: The options of the whole program (the group's callback), accepted after the subcommand too, as
#: users type them (``lockcompare evaluate x --plugin-path DIR``); each takes one value.
GLOBAL_OPTIONS = ("--plugin-path",)


def hoist_global_options(args: list[str]) -> list[str]:
    """``args`` with every :data:`GLOBAL_OPTIONS` occurrence moved before the subcommand, where
    click's group parses it; everything after a ``--`` stays where it is.

    >>> hoist_global_options(["evaluate", "x", "--plugin-path", "d", "--quick"])
    ['--plugin-path', 'd', 'evaluate', 'x', '--quick']
    >>> hoist_global_options(["run", "--plugin-path=d"])
    ['--plugin-path=d', 'run']
    >>> hoist_global_options(["run", "--", "--plugin-path", "d"])
    ['run', '--', '--plugin-path', 'd']
    """
    hoisted: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg in GLOBAL_OPTIONS and i + 1 < len(args):
            hoisted.extend(args[i : i + 2])
            i += 2
            continue
        if arg.split("=", 1)[0] in GLOBAL_OPTIONS and "=" in arg:
            hoisted.append(arg)
        else:
            rest.append(arg)
        i += 1
    return hoisted + rest


class OneLineErrors(TyperGroup):
    """Run the group in non-standalone mode and turn every failure into one line + exit code."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        _setup_logging()
        given = kwargs.get("args", args[0] if args else None)
        argv = hoist_global_options(list(given if given is not None else sys.argv[1:]))
        args, kwargs["args"] = (), argv
        kwargs["standalone_mode"] = False  # whatever the caller asked: failures are ours to print
        try:
            remember_secrets(  # every password given, hidden in whatever line quotes it (issue 38)
                argv,
                passwords=(os.environ.get("LOCKCOMPARE_REDIS_PASSWORD", ""), os.environ.get("PGPASSWORD", "")),
            )
            with _whole_command():
                result = super().main(*args, **kwargs)
        except typer.TyperException as exc:  # typer's (vendored click's) usage and parameter errors
            _end_if_signalled()
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            print(f"lockcompare: error: {redact(exc.format_message())}{hint}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except (typer.Abort, KeyboardInterrupt):
            print(INTERRUPTED, file=sys.stderr)
            sys.exit(130)
        except LockcompareError as exc:
            _end_if_signalled()  # an error a swallowed signal caused (a cut import) is the signal's
            print(f"lockcompare: error: {redact(str(exc))}", file=sys.stderr)  # whatever URL it quotes
            sys.exit(exc.exit_code)
        except BrokenPipeError:  # the reader of stdout went away (`| head`): nothing left to say
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except OSError as exc:  # the last net: an OS error no layer above translated is still one line
            _end_if_signalled()
            where = f"{exc.filename}: " if exc.filename else ""
            print(f"lockcompare: error: {where}{exc.strerror or exc}", file=sys.stderr)
            sys.exit(1)
        except MemoryError:
            print("lockcompare: error: out of memory", file=sys.stderr)
            sys.exit(1)
        if result == 130:  # typer turns KeyboardInterrupt into Exit(130), returned in this mode
            print(INTERRUPTED, file=sys.stderr)
            sys.exit(130)
        _end_if_signalled()  # a signal some library caught and swallowed still ends the command (issue 49)
        sys.exit(result if isinstance(result, int) else 0)


INTERRUPTED = "lockcompare: interrupted; servers and workers stopped"


def _end_if_signalled() -> None:
    """End with the exit code and line of the signal that arrived during the command, if one did,
    whatever happened after it (see interrupts.py)."""
    signum = interrupts.received()
    if signum is None:
        return
    exc = interrupts.exception_for(signum)
    if isinstance(exc, Terminated):
        print(f"lockcompare: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    print(INTERRUPTED, file=sys.stderr)
    sys.exit(130)


app = typer.Typer(
    cls=OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Measure what distributed locks really guarantee, with real redis-server nodes and real worker processes.",
)


def _print_version(value: bool) -> None:
    """``--version``: the package's version and the revision its code comes from (a row's
    ``source_revision``), then exit."""
    if not value:
        return
    from lockcompare.infra.provenance import lockcompare_version, source_revision

    revision = source_revision() or "unknown revision"
    print(f"lockcompare {lockcompare_version()} ({revision})")
    raise typer.Exit(0)


@app.callback()
def _everywhere(
    version: Annotated[  # noqa: ARG001  (eager: its callback prints and exits)
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version and the code revision (as every row's source_revision records it), and exit.",
        ),
    ] = False,
    plugin_path: Annotated[
        str | None,
        typer.Option(
            "--plugin-path",
            envvar="LOCKCOMPARE_PLUGIN_PATH",
            help=f"Directories ('{os.pathsep}'-separated) to import package.module:Class backends from, before "
            "the installed packages; the current directory is searched after them.",
        ),
    ] = None,
) -> None:
    """Where module:Class plug-ins are found, for every command (spawned workers inherit it)."""
    from lockcompare.backends import add_plugin_paths  # here: `lockcompare table` loads no backend at import

    try:  # a deleted working directory: no plug-in is found there, and no command needs it to exist
        here = [os.getcwd()]
    except OSError:
        here = []
    add_plugin_paths(first=[d for d in (plugin_path or "").split(os.pathsep) if d], last=here)
