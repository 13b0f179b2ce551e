"""A plug-in whose import takes as long as the environment says (a heavy client library on a busy
machine): loading it is start-up, not one of the backend's calls.

Imported by spec (``slow_loading_backend:SlowLoadingLock``) in the battery's child process only,
which inherits the environment the test set.
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

from lockcompare.backends.no_lock import NoLock

#: Seconds the import sleeps (read in the child that imports this module).
IMPORT_SLEEP_ENV = "LOCKCOMPARE_TEST_IMPORT_SLEEP_S"

time.sleep(float(os.environ.get(IMPORT_SLEEP_ENV, "0")))


class SlowLoadingLock(NoLock):
    """No lock at all; only its module's import is slow."""

    summary: ClassVar[str] = "slow to import"
