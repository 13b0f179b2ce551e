"""The shipped conformance battery passes for both etcd backends, on real etcd members.

Through the pytest plugin exactly as a plug-in author uses it (a subclass naming the backend): the
plugin starts etcd members for a backend that declares ``servers = "etcd"``, times the expiry
properties with its 1 s leases and its lessor's lag, and crashes members of private 5-member
clusters for the quorum properties.
"""

from __future__ import annotations

import pytest

from lockcompare.errors import BackendNotViableError
from lockcompare.infra.etcd.server import find_etcd
from lockcompare.testing import BackendContract

try:
    find_etcd()
except BackendNotViableError as exc:
    pytest.skip(f"etcd not installed: {exc}", allow_module_level=True)


class TestEtcdContract(BackendContract):
    backend_name = "etcd"


class TestEtcdFencedContract(BackendContract):
    backend_name = "etcd-fenced"
