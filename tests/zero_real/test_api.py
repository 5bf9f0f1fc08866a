"""zero_real's Python API (zero_real/api.py): a run from Python is the command's run: the same
losses bit for bit at the same seed (a single-process reference: the command itself), the same
recorded scenario and overrides, and bad input one InputError before any rank starts."""

import json

import pytest

torch = pytest.importorskip("torch")

import zero_real  # noqa: E402
from tests.conftest import SCENARIOS  # noqa: E402
from tests.zero_real.test_cli import run_zero_real  # noqa: E402
from zerosim.errors import InputError  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"


def test_a_run_from_python_is_the_commands_run(tmp_path):
    measured = zero_real.measure(TINY, stage=2, nproc=2, steps=2, collectives="ring",
                             sets={"training.micro_batch": 3}, out=tmp_path / "api.json",
                             run_timeout_s=240)
    result = run_zero_real("run", str(TINY), "--stage", 2, "--nproc", 2, "--steps", 2,
                           "--collectives", "ring", "--set", "training.micro_batch=3",
                           "--out", str(tmp_path / "cli.json"), "--run-timeout-s", 240)
    assert result.code == 0, result.stderr
    command = json.loads((tmp_path / "cli.json").read_text())
    assert json.loads((tmp_path / "api.json").read_text()) == json.loads(json.dumps(measured))
    assert measured["losses"] == command["losses"]  # same seed, same data, same sums
    for key in ("scenario", "stage", "world_size", "overrides", "backend", "collectives",
                "zerosim_memory"):
        assert measured[key] == command[key], key
    assert measured["overrides"] == ["training.micro_batch=3"]
    ledgers = [rank["ledger"] for rank in measured["ranks"]]
    assert ledgers == [rank["ledger"] for rank in command["ranks"]]


@pytest.mark.parametrize("kwargs, words", [
    ({"stage": 4}, "--stage"),
    ({"stage": 1, "nproc": 0}, "--nproc"),
    ({"stage": 1, "fake_world_size": 8, "nproc": 2}, "--fake-world-size runs one process"),
    ({"stage": 1, "sets": ["model.no_such_key=1"]}, "unknown key model.no_such_key"),
    ({"stage": 1, "no_such_flag": 3}, "unrecognized arguments: --no-such-flag"),
    ({"stage": 1, "sequence_parallel": True}, "splits the sequence over a tensor-parallel"),
    ({"stage": 1, "help": True}, "help= is not a flag it takes"),
    ({"stage": 1, "fake_world_size": 8, "collectives": "ring"}, "native"),
])
def test_bad_input_is_one_input_error(kwargs, words):
    with pytest.raises(InputError, match=words) as caught:
        zero_real.measure(TINY, **kwargs)
    message = str(caught.value)  # the command's line, less what only a command line says
    assert "\n" not in message and "zero-real --help" not in message
    assert not message.startswith("zero-real")
