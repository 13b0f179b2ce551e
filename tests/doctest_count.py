"""Where tests/test_doctests.py leaves how many docstring examples each module ran, for the summary line
tests/conftest.py prints (pytest counts each module as one test; the examples are what ran)."""

from __future__ import annotations

import pytest

#: (module, examples attempted) of every module whose examples ran in this session.
RAN = pytest.StashKey[list[tuple[str, int]]]()
