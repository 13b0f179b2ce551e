"""The matrix's probes in fewer processes (runner/probe_child.py): Python backends share one child,
and what a failing probe reports is what a probe of its own reports."""

from __future__ import annotations

import pytest

from lockcompare.backends import BackendConfig
from lockcompare.runner.probe_child import construct_all_in_child, probe_in_children
from lockcompare.runner.trial import construct_in_child

pytestmark = pytest.mark.full  # spawned children on a real cluster


def test_backends_that_construct_share_one_child_and_pass(backend_config: BackendConfig) -> None:
    names = ["none", "single", "fenced", "redlock"]
    assert construct_all_in_child(names, config=backend_config, timeout_s=5) == ["", "", "", ""]


def test_a_failure_in_the_shared_child_is_reported_as_its_own_probe_reports_it(backend_config: BackendConfig) -> None:
    names = ["single", "plugins.broken:RaisesInInit", "fenced", "plugins.broken:DeclaresNothing"]
    alone = [construct_in_child(name, config=backend_config, timeout_s=5) for name in names]
    assert alone[0] == alone[2] == ""
    assert alone[1] == "RuntimeError: no licence key"
    assert construct_all_in_child(names, config=backend_config, timeout_s=5) == alone
    assert probe_in_children(names, config=backend_config, timeout_s=5) == alone
