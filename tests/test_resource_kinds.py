"""The resource is a kind: the registry (entry-point group ``lockcompare.resources``) picks the
implementation that owns a URL, each satisfies the one interface, and says what its failures are."""

from __future__ import annotations

import inspect

import pytest

from lockcompare.errors import UnknownNameError
from lockcompare.runner import resource
from lockcompare.runner.resource import Resource, registered_resources, resource_for


def test_the_built_in_resources_are_registered_by_their_servers_protocol() -> None:
    assert {name: cls.__name__ for name, cls in registered_resources().items()} == {
        "postgres": "PgResource",
        "redis": "RedisResource",
    }


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6379/0", "RedisResource"),
        ("unix:///tmp/redis.sock", "RedisResource"),
        ("postgresql://postgres@127.0.0.1:5432/postgres", "PgResource"),
    ],
)
def test_the_resource_that_owns_the_url_serves_it(url: str, expected: str) -> None:
    assert resource_for(url).__name__ == expected


def test_a_url_no_resource_owns_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(
        UnknownNameError, match=r"no installed resource lives on http:// servers \(known: postgres, redis\)"
    ):
        resource_for("http://127.0.0.1:2379")


def test_every_registered_resource_has_every_member_of_the_interface_with_its_signature() -> None:
    members = [name for name in dir(Resource) if not name.startswith("_") and name not in dir(object)]
    for cls in registered_resources().values():
        for name in members:
            assert hasattr(cls, name), f"{cls.__name__} lacks {name}"
            if callable(getattr(Resource, name)) and name != "failures":
                assert inspect.signature(getattr(cls, name)).parameters.keys() == (
                    inspect.signature(getattr(Resource, name)).parameters.keys()
                ), f"{cls.__name__}.{name}"
        assert cls.failures and all(issubclass(f, Exception) for f in cls.failures)


def test_a_third_resource_is_one_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the runner asks is the registry: a resource registered for another protocol serves its URLs."""

    class Elsewhere:
        failures = (OSError,)

        @classmethod
        def owns(cls, url: str) -> bool:
            return url.startswith("elsewhere://")

    monkeypatch.setattr(resource, "registered_resources", lambda: {**registered_resources(), "elsewhere": Elsewhere})
    assert resource_for("elsewhere://host/db") is Elsewhere
    assert resource_for("redis://127.0.0.1:6379/0").__name__ == "RedisResource"
