"""Lock clients whose helper process tries to get away from its worker (issue 38), for
tests/test_cgroups.py: each renews its lease from the helper, so a helper the pause did not freeze
shows as a renewal inside a pause in the history (scripts/renewals_in_pauses.py).

- ``SetsidHelperLock``: the helper calls ``setsid()`` (leaves the worker's process group);
- ``DoubleForkHelperLock``: the helper daemonises by fork, ``setsid()``, fork — the process that
  serves the pipe is no descendant of the worker and is reparented to init; it also ignores the end
  of its input and does not ask to die with its parent;
- ``EofIgnoringHelperLock``: the helper calls ``setsid()``, does not ask to die with its parent, and
  stays after stdin is closed (``close()`` only closes the pipe): nothing but a kill ends it.

Under process-group isolation the first is named and its trial is ``unknown``; the other two (the
double-forked one is not even found) outlive their trials. In a cgroup all three are frozen by a
pause and killed at the trial's end (infra/cgroup.py). From a shell: ``--plugin-path tests``.
"""

from __future__ import annotations

from typing import ClassVar

from plugins.renewing_child import RenewingChildLock


class SetsidHelperLock(RenewingChildLock):
    summary: ClassVar[str] = "a renewing helper that calls setsid() (leaves the worker's process group)"
    helper_args: ClassVar[tuple[str, ...]] = ("--escape",)


class DoubleForkHelperLock(RenewingChildLock):
    summary: ClassVar[str] = "a renewing helper that double-forks (fork, setsid, fork) and outlives its input"
    helper_args: ClassVar[tuple[str, ...]] = ("--double-fork", "--linger")


class EofIgnoringHelperLock(RenewingChildLock):
    summary: ClassVar[str] = "a renewing helper that calls setsid() and keeps running after stdin is closed"
    helper_args: ClassVar[tuple[str, ...]] = ("--escape", "--linger")

    def close(self) -> None:
        """Close the pipe only, as a careless plug-in would: the helper ignores it."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
