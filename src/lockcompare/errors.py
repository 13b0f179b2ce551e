"""lockcompare's own exceptions; errors from lower libraries are translated into these at the boundary.

Every error a user can cause or meet is one of these, and the CLI prints it as one line with a
non-zero exit code (never a traceback)::

    LockcompareError                 base class; exit code 1 unless a subclass says otherwise
    ├── ConfigError                  bad input from the user; exit code 2
    │   ├── UnknownNameError         no backend / experiment / format of that name
    │   ├── InvalidValueError        a zero or negative time, a malformed list or number
    │   ├── InvalidURLError          a --nodes / --resource value that is not a redis URL
    │   ├── ResultsFileError         a results CSV that is missing, unreadable or not ours
    │   │   └── ResultsBusyError     another run is writing that results file (names its pid)
    │   └── OutputPathError          an output path that cannot be written (checked before any trial)
    ├── WriteError                   an OS error while writing output (disk full, /dev/full, EACCES)
    ├── ClusterError                 the redis-server nodes could not be provided
    │   ├── RedisServerNotFoundError no redis-server binary anywhere we look
    │   ├── ServerStartError         a spawned redis-server did not come up
    │   ├── ClusterStartFailed       a trial's cluster failed to start every time the pool tried
    │   ├── NodeUnreachableError     a node or the resource does not answer PING
    │   ├── ReplicationError         a master/replica pair would not sync or fail over
    │   ├── EtcdUnavailable          no etcd member answered in time
    │   └── EtcdRequestError         an etcd member answered with an error
    ├── BackendError                 a lock backend cannot be used
    │   ├── BackendLoadError         a module:Class that does not import or is not a backend
    │   ├── BackendNotViableError    a backend whose library is missing here (says what to install)
    │   ├── ExternalClientError      an external lock client (a manifest's command) failed to start or speak
    │   └── BackendCallFailed        the conformance battery's call did not return a proper result
    │       ├── BackendCallRaised    the backend raised instead of returning
    │       ├── BackendCallTimedOut  it did not return within the deadline (its process was killed)
    │       └── BackendHostDied      the battery's backend host exited mid-conversation
    ├── FaultNotSupportedError       a fault needs a tool this machine lacks (says what to install)
    ├── ProxyError                   a link proxy did not start or answer its control pipe
    ├── TrialError                   a trial could not complete (a worker died, a timeout)
    ├── ReleaseFailed                a backend's unlock request failed: released or not, it cannot tell
    ├── SchedulerLostError           the Dask scheduler went away mid-matrix (says how to resume)
    ├── UnknownTrialsError           some trials were judged unknown (their problems printed first)
    ├── RenderError                  plots or a report could not be produced
    │   └── PlotDependencyError      matplotlib is not installed (says what to install)
    └── Terminated                   SIGTERM/SIGHUP/SIGQUIT arrived; everything was stopped; exit 128+N

A few exceptions are signals inside one module and never reach the user, so they are not
lockcompare errors: ``pg_client.SessionLost`` / ``QueryFailed`` (translated by their callers),
``resource_pg.ResourceError`` (a worker reports it as its error), ``conformance.PropertyFailed``
(an ``AssertionError``, for pytest) and ``conformance.NotClaimed``.
"""

from __future__ import annotations


class LockcompareError(Exception):
    """Base of every lockcompare error."""

    exit_code = 1


class ConfigError(LockcompareError):
    """The user asked for something that cannot be done as written."""

    exit_code = 2


class UnknownNameError(ConfigError):
    """A backend, experiment or format name that does not exist."""


class InvalidValueError(ConfigError):
    """A value out of range or malformed (e.g. a zero or negative time)."""


class InvalidURLError(ConfigError):
    """A node or resource address that is not a redis:// URL."""


class ResultsFileError(ConfigError):
    """A results file that cannot be read, or would be overwritten."""


class ResultsBusyError(ResultsFileError):
    """Another lockcompare run holds the results file's lock."""


class OutputPathError(ConfigError):
    """An output path that cannot be written; found before anything runs."""


class WriteError(LockcompareError):
    """Writing output failed at the OS level (disk full, permissions); the files stay whole."""


class ClusterError(LockcompareError):
    """The Redis servers for a run could not be provided."""


class RedisServerNotFoundError(ClusterError):
    """No redis-server binary was found."""


class ServerStartError(ClusterError):
    """A redis-server process we spawned did not start."""


class ClusterStartFailed(ClusterError):
    """A cluster failed to start every time the pool tried (infra/pool.py START_ATTEMPTS): the
    matrix skips its trial's cell with one line and goes on."""


class NodeUnreachableError(ClusterError):
    """A Redis server does not answer."""


class ReplicationError(ClusterError):
    """The replica did not connect or catch up, or a failover could not be completed."""


class EtcdUnavailable(ClusterError):
    """No member answered in time (all refused, or the call timed out)."""


class EtcdRequestError(ClusterError):
    """A member answered with an error (HTTP status other than 200)."""


class BackendError(LockcompareError):
    """A lock backend cannot be loaded or used."""


class BackendLoadError(BackendError):
    """A backend spec that does not resolve to a usable class."""

    exit_code = 2


class BackendNotViableError(BackendError):
    """A backend whose third-party library is not installed here."""


class ExternalClientError(BackendError):
    """An external lock client (backends/external: a manifest's command) could not start, failed its
    handshake (wrong protocol, a clock that is not CLOCK_MONOTONIC) or could not be restarted."""


class BackendCallFailed(BackendError):
    """A call into the backend under test did not return a proper result."""


class BackendCallRaised(BackendCallFailed):
    """The backend raised instead of returning (an exception is not a refusal)."""


class BackendCallTimedOut(BackendCallFailed):
    """The backend did not return within the deadline; its process was killed."""


class BackendHostDied(BackendCallFailed):
    """The host process exited (or was killed by an earlier timeout) mid-conversation."""


class FaultNotSupportedError(LockcompareError):
    """A fault cannot be applied here (e.g. no libfaketime, or a redis-server that hangs under it);
    raised up front, before any trial runs."""


class ProxyError(LockcompareError):
    """The link proxy process failed to start, or did not answer a control call."""


class TrialError(LockcompareError):
    """A trial could not run to the end."""


class ReleaseFailed(LockcompareError):
    """Raised by a backend's ``release`` whose request failed (no answer, a dropped connection):
    it cannot tell whether the lock was released, which ``False`` ("this lease did not hold the
    lock") would claim. The worker records the release as failed with this message (``error``);
    the checker never takes such an unlock as evidence that the lock was elsewhere. Never reaches
    the user: a plug-in raises it, the worker records it."""


class SchedulerLostError(LockcompareError):
    """The Dask scheduler of a ``--dask`` matrix went away: the rows that came back are written, the
    other trials never ran here (no verdict of theirs to report); ``--resume`` runs them."""


class UnknownTrialsError(LockcompareError):
    """Some trials could not be judged (their problems were printed above)."""


class RenderError(LockcompareError):
    """Pictures or a report could not be made from results that are themselves fine."""


class PlotDependencyError(RenderError):
    """matplotlib (the optional ``plot`` extra) is not installed."""


class Terminated(LockcompareError):
    """SIGTERM (or SIGHUP, SIGQUIT) arrived: unwinding through every ``finally`` so that servers and
    workers stop; the exit code is the shell's 128 + the signal's number."""

    exit_code = 143

    def __init__(self, message: str, *, exit_code: int = 143) -> None:
        super().__init__(message)
        self.exit_code = exit_code
