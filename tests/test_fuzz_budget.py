"""The fuzz budget (tests/fuzzing.py): a whole run of the suite feeds at least FUZZ_BUDGET
generated inputs to the commands and file readers. Ordered last by tests/conftest.py, so every
fuzz test has counted its inputs; a run of part of the suite (a path, -k) skips it."""

import pytest

from tests.conftest import FUZZ_RAN, fuzz_tests
from tests.fuzzing import FUZZ_BUDGET, GENERATED


def test_a_whole_run_generates_the_fuzz_budget():
    missing = sorted(fuzz_tests() - FUZZ_RAN)
    if missing:
        pytest.skip(f"{len(missing)} fuzz test(s) did not run in this session (part of the suite "
                    f"was selected), e.g. {'::'.join(missing[0])}")
    total = sum(GENERATED.values())
    assert total >= FUZZ_BUDGET, (total, dict(GENERATED))
