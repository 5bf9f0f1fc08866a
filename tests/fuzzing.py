"""The fuzz budget. Every hypothesis test that feeds generated input to a command or a file reader
takes its settings from `fuzz(n)` and calls `generated(name)` once per input; the budget test
(tests/test_fuzz_budget.py, ordered last by tests/conftest.py) asserts that a whole run generated
at least FUZZ_BUDGET inputs.

Runs are derandomized, so CI sees the same inputs every time (a failure reproduces); set
ZEROSIM_FUZZ_EXPLORE=1 to draw new ones."""

from __future__ import annotations

import os
from collections import Counter

from hypothesis import HealthCheck, settings

FUZZ_BUDGET = 2000
GENERATED: Counter[str] = Counter()


def fuzz(max_examples: int) -> settings:
    return settings(max_examples=max_examples, deadline=None,
                    derandomize=not os.environ.get("ZEROSIM_FUZZ_EXPLORE"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


def generated(name: str) -> None:
    """Count one generated input of the test `name`."""
    GENERATED[name] += 1


def numbers_in(data):
    """Every number (not a bool) in a JSON document, however deep."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            yield item
