"""What a command imports: numpy only where it is used (the jitter of per-rank mode and the
calibration fits), so that the commands users run most do not pay for it at start-up."""

import subprocess
import sys

import pytest

from tests.conftest import SCENARIOS

LLAMA = str(SCENARIOS / "llama2_7b_64gpu.toml")
PROBE = """import sys
from zerosim.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print("numpy" in sys.modules)
"""


def imports_numpy(*argv: str) -> bool:
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=list(argv))],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return out.strip().splitlines()[-1] == "True"


def test_importing_the_command_line_does_not_import_numpy():
    assert not imports_numpy("--version")


@pytest.mark.parametrize("argv", [
    ("simulate", LLAMA), ("memory", LLAMA), ("plan", LLAMA),
    ("collective", LLAMA, "--op", "all_reduce", "--size", "1G"),
])
def test_commands_without_jitter_do_not_import_numpy(argv):
    assert not imports_numpy(*argv)


def test_jitter_does_import_it():
    """The probe can see numpy: the per-rank mode's random jitter draws with it."""
    assert imports_numpy("simulate", str(SCENARIOS / "tiny_gpt_4rank_cpu.toml"), "--stage", "1",
                         "--set", "variation.jitter_pct=5")
