"""The golden cases: every command line of tests/golden/cases.py prints what it printed at the
recorded commit (tests/golden/expected/, from a84d8a7), byte for byte, with the same exit code.
A reorganisation of the code must leave all of them equal; a change of behaviour re-records them
(`python bench/golden.py record --ref REF`) in the commit that explains it."""

import pytest

from tests.conftest import ROOT
from tests.golden import harness
from tests.golden.cases import CASES
from zerosim import cli

EXPECTED = harness.read()


def test_every_case_is_recorded():
    assert [case.name for case in CASES] == list(EXPECTED)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_output_is_the_recorded_output(monkeypatch, case):
    monkeypatch.chdir(ROOT)  # relative paths, printed as typed
    actual = harness.run_case(cli.main, case, ROOT)
    difference = harness.first_difference(EXPECTED.get(case.name), actual)
    assert difference is None, f"zerosim {' '.join(case.argv)}: {difference}"
