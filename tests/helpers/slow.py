"""Fixtures that train or start processes, and the check that only ``slow`` tests use them.

``pytest -m "not slow"`` is the quick loop: a fixture that takes seconds to minutes must never
be built there, so the tests that request one must carry ``@pytest.mark.slow``.
"""

import pytest

SLOW_FIXTURES: set[str] = set()


def slow_fixture(*, scope: str = "function"):
    """``pytest.fixture(scope=scope)`` for a fixture that trains or starts processes."""

    def decorate(function):
        SLOW_FIXTURES.add(function.__name__)
        return pytest.fixture(scope=scope)(function)

    return decorate


def unmarked_users_of_slow_fixtures(items) -> list[str]:
    """One line per collected test that requests a slow fixture but is not marked ``slow``."""
    return [
        f"{item.nodeid} uses {', '.join(sorted(SLOW_FIXTURES & set(item.fixturenames)))}"
        for item in items
        if item.get_closest_marker("slow") is None and SLOW_FIXTURES & set(item.fixturenames)
    ]
