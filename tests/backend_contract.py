"""The contract every lock backend must honour, against real redis-server nodes.

Each backend's test module subclasses :class:`BackendContract` and sets ``backend_name``; plug-in
authors can do the same with their own ``package.module:Class`` spec.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from lockcompare.backends import BackendConfig, Lease, LockBackend, Refusal, load_backend

TTL_MS = 1000
SHORT_TTL_MS = 150


class BackendContract:
    backend_name: str = ""

    @pytest.fixture
    def make_backend(self, backend_config: BackendConfig) -> Iterator[Callable[[], LockBackend]]:
        """A factory for independent instances (one per simulated worker), closed afterwards."""
        made: list[LockBackend] = []

        def make() -> LockBackend:
            backend = load_backend(self.backend_name)(config=backend_config)
            made.append(backend)
            return backend

        yield make
        for backend in made:
            backend.close()

    @pytest.fixture
    def backend_cls(self) -> type[LockBackend]:
        return load_backend(self.backend_name)

    def test_declares_the_protocol(self, backend_cls: type[LockBackend]) -> None:
        assert isinstance(backend_cls.summary, str) and backend_cls.summary
        assert isinstance(backend_cls.exclusive, bool)
        assert isinstance(backend_cls.issues_fencing_tokens, bool)

    def test_acquire_returns_a_lease_with_a_random_owner(self, make_backend, key: str) -> None:
        a, b = make_backend(), make_backend()
        first = a.acquire(key=key, ttl_ms=TTL_MS)
        assert isinstance(first, Lease) and first.key == key and first.owner
        assert a.release(first) is True
        second = b.acquire(key=key, ttl_ms=TTL_MS)
        assert isinstance(second, Lease) and second.owner != first.owner
        b.release(second)

    def test_lease_validity_is_within_the_ttl(self, make_backend, backend_cls, key: str) -> None:
        if not backend_cls.exclusive:
            pytest.skip("a non-exclusive backend promises no validity")
        before = time.monotonic_ns()
        lease = make_backend().acquire(key=key, ttl_ms=TTL_MS)
        assert isinstance(lease, Lease) and lease.valid_until_ns is not None
        assert before < lease.valid_until_ns <= before + TTL_MS * 1_000_000 + 50_000_000

    def test_second_acquire_is_refused_while_held(self, make_backend, backend_cls, key: str) -> None:
        if not backend_cls.exclusive:
            pytest.skip("the no-lock baseline grants everyone")
        a, b = make_backend(), make_backend()
        lease = a.acquire(key=key, ttl_ms=TTL_MS)
        assert lease
        refused = b.acquire(key=key, ttl_ms=TTL_MS)
        assert isinstance(refused, Refusal) and not refused
        assert a.release(lease) is True
        assert b.acquire(key=key, ttl_ms=TTL_MS)

    def test_lock_is_free_again_after_the_ttl(self, make_backend, backend_cls, key: str) -> None:
        if not backend_cls.exclusive:
            pytest.skip("the no-lock baseline has no TTL")
        a, b = make_backend(), make_backend()
        assert a.acquire(key=key, ttl_ms=SHORT_TTL_MS)
        assert not b.acquire(key=key, ttl_ms=TTL_MS)
        time.sleep(SHORT_TTL_MS / 1000 + 0.1)
        assert b.acquire(key=key, ttl_ms=TTL_MS)

    def test_expired_holder_cannot_release_its_successors_lock(self, make_backend, backend_cls, key: str) -> None:
        if not backend_cls.exclusive:
            pytest.skip("the no-lock baseline has no owner")
        a, b, c = make_backend(), make_backend(), make_backend()
        old = a.acquire(key=key, ttl_ms=SHORT_TTL_MS)
        assert old
        time.sleep(SHORT_TTL_MS / 1000 + 0.1)
        new = b.acquire(key=key, ttl_ms=TTL_MS)
        assert new
        assert a.release(old) is False  # the zombie's release must not delete b's key
        assert not c.acquire(key=key, ttl_ms=TTL_MS)  # so b still holds it
        assert b.release(new) is True

    def test_fencing_tokens_strictly_increase(self, make_backend, backend_cls, key: str) -> None:
        a = make_backend()
        tokens = []
        for _ in range(5):
            lease = a.acquire(key=key, ttl_ms=TTL_MS)
            assert lease
            tokens.append(lease.fencing_token)
            a.release(lease)
        if backend_cls.issues_fencing_tokens:
            assert all(isinstance(t, int) for t in tokens)
            assert tokens == sorted(set(tokens)), tokens
        else:
            assert tokens == [None] * 5
