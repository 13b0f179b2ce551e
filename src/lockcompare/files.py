"""Files lockcompare writes and reads, handled so that a user's mistake or a full disk costs one
line and never a torn file:

- every output path is checked before any trial runs (:func:`check_output_file`,
  :func:`check_output_dir`): a trial's work is never lost to a directory found read-only at the end;
- an OS error at write time is one :class:`WriteError` line (:func:`writing`), and a file written
  through a ``.part`` name is whole or absent (:func:`replace_atomically`);
- inputs are read with a size cap (:func:`read_capped`): ``table /dev/zero`` is refused, not an
  out-of-memory;
- one writer per results file (:func:`results_lock`): a lock file beside it, held for the whole run.

Standard library only: every layer may use it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from lockcompare.errors import (
    LockcompareError,
    OutputPathError,
    ResultsBusyError,
    ResultsFileError,
    WriteError,
)

#: Inputs larger than this are refused (a results CSV row is about 1 KB: 64 MB is ~60 000 trials).
MAX_INPUT_MB = 64
MAX_INPUT_ENV = "LOCKCOMPARE_MAX_INPUT_MB"


def input_cap_bytes() -> int:
    text = os.environ.get(MAX_INPUT_ENV, "").strip()
    try:
        mb = int(text) if text else MAX_INPUT_MB
    except ValueError:
        mb = MAX_INPUT_MB
    return max(mb, 1) * 1024 * 1024


def read_capped(path: Path, *, limit: int | None = None, error: type[LockcompareError] = ResultsFileError) -> bytes:
    """The bytes of ``path``, refusing (as ``error``) one larger than ``limit`` (default: the input
    cap) or unreadable. Reads at most ``limit + 1`` bytes, so a device never exhausts memory."""
    cap = limit if limit is not None else input_cap_bytes()
    try:
        with path.open("rb") as fh:
            data = fh.read(cap + 1)
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}") from None
    except MemoryError:
        raise error(f"cannot read {path}: out of memory") from None
    if len(data) > cap:
        size = f"{cap // (1024 * 1024)} MB" if cap >= 1024 * 1024 else f"{cap // 1024} KB"
        hint = f" (set {MAX_INPUT_ENV} to raise the cap)" if limit is None else ""
        raise error(f"{path} is larger than {size}: not an input lockcompare reads{hint}")
    return data


def _probe_dir(directory: Path, *, flag: str, target: Path) -> None:
    """Create and remove a file in ``directory``: permission bits do not stop root, a read-only
    file system does, and only trying tells."""
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".lockcompare-probe-")
    except OSError as exc:
        raise OutputPathError(f"{flag} {target}: cannot write in {directory}: {exc.strerror or exc}") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)


def _nearest_dir(path: Path, *, flag: str, target: Path) -> Path:
    """The closest existing ancestor of ``path``, which must be a directory."""
    for parent in (path.parent, *path.parent.parents):
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise OutputPathError(f"{flag} {target}: {parent} is not a directory")
            return parent
    return Path.cwd()


def check_output_file(path: Path, *, flag: str, existing_ok: bool = True) -> None:
    """Refuse, before anything runs, an output file that cannot be written: a directory or device
    in its place, a regular file in place of a folder on its way, a read-only place, a name that is
    not UTF-8 text (a results row names its history by this path, and a row is UTF-8)."""
    check_text_name(path, flag=flag)
    if path.exists():
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise OutputPathError(f"{flag} {path} is a directory: it takes a file name")
        if not stat.S_ISREG(mode):
            raise OutputPathError(f"{flag} {path} is not a regular file")
        if not existing_ok:
            return
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            raise OutputPathError(f"{flag} {path}: cannot write it: {exc.strerror or exc}") from None
    _probe_dir(_nearest_dir(path, flag=flag, target=path), flag=flag, target=path)


def check_text_name(path: Path, *, flag: str) -> None:
    """Refuse a path whose bytes are not UTF-8 (Python holds them as lone surrogates)."""
    try:
        os.fsdecode(os.fsencode(path)).encode("utf-8")
    except UnicodeError:
        shown = os.fsencode(path).decode("utf-8", errors="backslashreplace")
        raise OutputPathError(f"{flag} {shown}: the name is not UTF-8 text; choose another name") from None


def check_output_dir(path: Path, *, flag: str) -> None:
    """Refuse, before anything runs, an output directory that cannot be created or written."""
    check_text_name(path, flag=flag)
    if path.exists():
        if not path.is_dir():
            raise OutputPathError(f"{flag} {path} is not a directory")
        _probe_dir(path, flag=flag, target=path)
        return
    _probe_dir(_nearest_dir(path, flag=flag, target=path), flag=flag, target=path)


def write_error(path: Path | str, exc: OSError) -> WriteError:
    return WriteError(f"cannot write {path}: {exc.strerror or exc}")


@contextlib.contextmanager
def writing(path: Path | str) -> Iterator[None]:
    """Turn an OS error raised inside into one :class:`WriteError` line naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise write_error(exc.filename or path, exc) from None


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` into ``path.part``, then rename over ``path``; on any failure the ``.part``
    file is removed and ``path`` is untouched (an OS error becomes a :class:`WriteError`)."""
    tmp = path.with_name(path.name + ".part")
    try:
        write(tmp)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_error(path, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


#: Lock files this process holds, with how many holders nest in it (evaluate runs several
#: matrices on one file under one lock).
_held: dict[Path, int] = {}
_PID_WAIT_S = 0.5


def real_path(path: Path) -> Path:
    """``path`` with every symlink on it resolved (the file need not exist yet).

    An output file is known by its real path: a run on a symlink then locks, appends to and puts
    its histories beside the file the link names, so two names for one file are one writer's.
    """
    return Path(os.path.realpath(path))


def lock_path_for(out: Path) -> Path:
    real = real_path(out)
    return real.with_name(real.name + ".lock")


def _lock_inode(out: Path) -> int | None:
    """Also flock the results file itself, when it exists: a hard link is another name for the same
    inode, whose lock file beside it would be another file. None when there is no file yet (no hard
    link to it can exist before it does)."""
    try:
        fd = os.open(out, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ResultsBusyError(
            f"{out} is being written by another lockcompare run (under another name for the same file): "
            "wait for it, or choose another --out"
        ) from None
    return fd


def _holder(fd: int) -> str:
    """The pid the holder wrote into the lock file (it writes it just after locking)."""
    deadline = time.monotonic() + _PID_WAIT_S
    while True:
        try:
            text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        except OSError:
            text = ""
        if text or time.monotonic() > deadline:
            return text or "unknown"
        time.sleep(0.02)


@contextlib.contextmanager
def results_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out`` for the block: a lock file ``<out>.lock`` beside it with
    ``flock`` (released by the kernel however this process ends). A second run on the same file is
    refused with one line naming the holder's pid. The lock file is removed on the way out."""
    path = lock_path_for(out)
    key = Path(os.path.abspath(path))
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputPathError(f"--out {out}: cannot create {path.parent}: {exc.strerror or exc}") from None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise OutputPathError(f"--out {out}: cannot create its lock file {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd) if exc.errno in (errno.EAGAIN, errno.EACCES) else ""
            os.close(fd)
            if not holder:
                raise OutputPathError(f"--out {out}: cannot lock {path}: {exc.strerror or exc}") from None
            raise ResultsBusyError(
                f"{out} is being written by another lockcompare run (pid {holder}): "
                "wait for it, or choose another --out"
            ) from None
        # A run that was finishing unlinks its lock file: make sure ours is still the one at the path.
        try:
            mine, there = os.fstat(fd), os.stat(path)
            if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    # From here the lock file is ours: one try, so that however the block ends (a refusal, a
    # signal's exception between two statements) the file goes with it.
    inode_fd: int | None = None
    try:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the lock holds without the pid; a refused run then says "pid unknown"
        inode_fd = _lock_inode(real_path(out))
        _held[key] = 1
        yield
    finally:
        _held.pop(key, None)
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)
        if inode_fd is not None:
            os.close(inode_fd)
