"""An output folder replaced whole: rendered beside it, then put in its place in one rename.

A report is a README and the PNGs it shows. Written file by file into its folder, a Ctrl-C or
SIGTERM left PNGs without their README or manifest, and the next ``report`` into that folder then
refused, taking the PNGs for files it had not written (issue 38). Here the files go into a new
hidden folder beside ``out``; when all of them are written, the user's own files in ``out`` are
linked into it and it takes ``out``'s place: in one ``renameat2(RENAME_EXCHANGE)`` where Linux
offers it, else in two renames. An interrupted rendering leaves the previous folder (or none) and
removes its own; one killed outright leaves a hidden folder that the next rendering beside it
removes (its name carries the dead pid).

Where the folder cannot be replaced whole (``out`` is a symbolic link, holds a folder of the
user's, or its parent cannot be written), each file is moved in with its own atomic rename, the
manifest last: a file is then never half-written, though the set may be.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lockcompare.processes import process_alive

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _staging_prefix(out: Path) -> str:
    return f".{out.name}.lockcompare-p{os.getpid()}-staging-"


@contextlib.contextmanager
def staged_folder(out: Path, *, ours: set[str]) -> Iterator[Path]:
    """Yield an empty folder to write into; when the block ends normally, it becomes ``out``.

    ``ours``: the names in ``out`` an earlier rendering wrote. They are dropped (this rendering
    wrote its own); every other entry of ``out`` is the user's and is kept.
    """
    _remove_dead_stagings(out)
    try:
        staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(out), dir=out.parent))
    except OSError:  # the parent cannot be written (out itself may): stage inside out
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(out), dir=out))
    try:
        yield staging
        _publish(staging, out, ours=ours)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # after an exchange: the previous folder


def _publish(staging: Path, out: Path, *, ours: set[str]) -> None:
    os.chmod(staging, _folder_mode(out))
    if staging.parent != out.parent or out.is_symlink():
        _move_files(staging, out, ours=ours)
        return
    if not out.exists():
        try:
            staging.rename(out)  # an empty folder made meanwhile is replaced too
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    if not _carry_over(out, staging, ours=ours):
        _move_files(staging, out, ours=ours)
        return
    if not _exchange(staging, out):
        previous = Path(tempfile.mkdtemp(prefix=_staging_prefix(out), dir=out.parent))
        out.rename(previous / "old")
        staging.rename(out)
        shutil.rmtree(previous, ignore_errors=True)


def _carry_over(out: Path, staging: Path, *, ours: set[str]) -> bool:
    """Link the user's entries of ``out`` into ``staging``; False if one of them cannot be (a folder)."""
    mine = _staging_prefix(out).split("-p", 1)[0]
    for entry in sorted(out.iterdir()):
        name = entry.name
        if name in ours or (staging / name).exists() or name.startswith(mine):
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry), staging / name)
        elif entry.is_file():
            try:
                os.link(entry, staging / name)
            except OSError:
                shutil.copy2(entry, staging / name)
        else:
            return False
    return True


def _move_files(staging: Path, out: Path, *, ours: set[str]) -> None:
    """The fallback: each file into ``out`` by its own rename, the manifest (a dot name) last, then
    the files of an earlier rendering this one did not write removed."""
    out.mkdir(parents=True, exist_ok=True)
    names = sorted((p.name for p in staging.iterdir()), key=lambda n: (n.startswith("."), n))
    for name in names:
        target = out / name
        if name in ours and target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)  # a folder an earlier rendering wrote (html/): a rename cannot replace it
        os.replace(staging / name, target)
    for name in sorted(ours - set(names)):
        path = out / name
        if path.is_file() and not path.is_symlink():
            path.unlink()


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders atomically (Linux renameat2); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _folder_mode(out: Path) -> int:
    """The mode ``out`` has, or a new folder would have (mkdtemp makes 0700)."""
    try:
        return out.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o777 & ~umask


def _remove_dead_stagings(out: Path) -> None:
    """Remove the staging folders beside (or inside) ``out`` of renderings that were killed."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.lockcompare-p(\d+)-staging-")
    for where in (out.parent, out):
        try:
            entries = list(where.iterdir())
        except OSError:
            continue
        for entry in entries:
            match = pattern.match(entry.name)
            if match and entry.is_dir() and not entry.is_symlink() and not process_alive(int(match.group(1))):
                shutil.rmtree(entry, ignore_errors=True)
