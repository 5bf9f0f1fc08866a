"""Junk in the flags of `zero-real run` and `calibrate` (numbers, nan, inf, huge, negative, text,
empty, lone surrogates as Python decodes non-UTF-8 argv bytes): every input either reaches the
launch with values inside the ranges flags.py documents, or is refused with exactly one line on
stderr, nothing on stdout, and exit 2. In-process, launching disabled (conftest.dry_run); this
box's memory is fixed at 4 GiB so the memory check draws the same line everywhere."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("torch")

from tests.conftest import SCENARIOS  # noqa: E402
from tests.fuzzing import fuzz, generated  # noqa: E402
from zero_real.checks import flags, preflight  # noqa: E402
from zerosim.contract import STAGES  # noqa: E402
from zerosim.units import GiB  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
COMMON = ["--nproc", "--backend", "--collectives", "--timeout-s", "--run-timeout-s", "--out"]
FLAGS = {
    "run": [*COMMON, "--stage", "--steps", "--timed-steps", "--fake-world-size", "--seed", "--lr",
            "--shard-group"],
    "calibrate": [*COMMON, "--min-size-KiB", "--max-size-MiB", "--seconds-per-size",
                  "--micro-batches"],
}
BASE = {"run": ["run", TINY, "--stage", "1"],
        "calibrate": ["calibrate", TINY, "--nproc", "2", "--out", "p.json"]}
JUNK = st.one_of(
    st.integers(-2**70, 2**70).map(str),
    st.integers(0, 70).map(lambda k: str(2**k)),
    st.floats().map(repr),  # nan, inf, -0.0, 1e-310, ...
    st.sampled_from(["", " ", "nan", "-nan", "inf", "-inf", "Infinity", "1e999", "0x10", "1_000",
                     "\u0663", "2**40", "1099511627776", "1,2", "0,2", ",", "native,ring",
                     "tree", "gloo", "nccl", ".", "/", "m.json", "no/such/m.json", "-1", "--"]),
    st.text(max_size=12),
    st.text(st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), min_size=1, max_size=4),
)


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(sorted(FLAGS)))
    argv = list(BASE[command])
    for _ in range(draw(st.integers(1, 3))):
        flag, value = draw(st.sampled_from(FLAGS[command])), draw(JUNK)
        argv += [f"{flag}={value}"] if draw(st.booleans()) else [flag, value]
    return command, argv


def _within(value, lo, hi) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi


def _check_run(cfg) -> None:
    assert cfg.stage in STAGES
    assert _within(cfg.nproc, 1, flags.MAX_WORLD)
    assert _within(cfg.steps, 1, flags.MAX_STEPS) and _within(cfg.timed_steps, 0, flags.MAX_STEPS)
    assert _within(cfg.seed, 0, flags.MAX_SEED)
    assert _within(cfg.lr, 0, flags.MAX_LR) and cfg.lr > 0
    assert cfg.fake_world_size is None or _within(cfg.fake_world_size, 1, flags.MAX_WORLD)
    assert cfg.run_timeout_s is None or _within(cfg.run_timeout_s, *flags.TIMEOUT_S)
    group, world = cfg.scenario.parallelism.shard_group, cfg.fake_world_size or cfg.nproc
    assert _within(group, 0, flags.MAX_SHARD_GROUP) and (group == 0 or world % group == 0)


def _check_calibrate(world) -> None:
    assert world.sizes and all(s & (s - 1) == 0 and 4 * world.nproc <= s <= flags.MAX_SIZE_BYTES
                               for s in world.sizes)
    assert list(world.sizes) == sorted(set(world.sizes))
    assert _within(world.seconds_per_size, 0, flags.MAX_SECONDS_PER_SIZE)
    assert world.seconds_per_size > 0
    assert 1 <= len(world.micro_batches) <= flags.MAX_MICRO_BATCHES
    assert all(_within(b, 1, flags.MAX_MICRO_BATCH) for b in world.micro_batches)


@pytest.fixture
def junk_box(monkeypatch, tmp_path):
    """Outputs land in tmp_path; MemAvailable is 4 GiB."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(preflight, "mem_available", lambda: 4 * GiB)
    return tmp_path


@fuzz(300)
@given(line=command_lines())
def test_junk_flags_are_refused_in_one_line_or_launch_checked_values(dry_run, junk_box, line):
    generated("zero_real_flags")
    command, argv = line
    done = dry_run(*argv)
    if done.launched is not None:
        assert _within(done.launched.timeout_s, *flags.TIMEOUT_S)
        (_check_run if command == "run" else _check_calibrate)(done.launched)
        return
    result = done.result
    assert result.code == 2, (argv, result.code, result.stderr)
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.endswith("\n"), (argv,
                                                                                  result.stderr)
    assert result.stderr.startswith("zero-real"), result.stderr
    assert "Traceback" not in result.stderr
    assert not [p for p in junk_box.iterdir() if p.name.endswith(".tmp")]
