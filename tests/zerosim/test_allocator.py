"""The caching allocator model against hand-computed segments: PyTorch's rounding rules exactly,
then sequences of mallocs and frees whose allocated and reserved bytes are worked out by hand
from those rules (zerosim/sim/allocator.py names the PyTorch function behind each)."""

from __future__ import annotations

import ast
import itertools
import random
from pathlib import Path

import pytest

from zerosim.sim import allocator
from zerosim.sim.allocator import (
    CachingAllocator,
    is_small,
    round_size,
    segment_size,
    should_split,
)

KiB = 1 << 10
MiB = 1 << 20


@pytest.mark.parametrize("size, rounded", [
    (1, 512), (511, 512), (512, 512), (513, 1024), (1000, 1024), (MiB - 1, MiB), (MiB, MiB),
    (MiB + 1, MiB + 512), (11 * MiB - 3, 11 * MiB),
])
def test_round_size_to_512_bytes(size, rounded):
    assert round_size(size) == rounded


@pytest.mark.parametrize("rounded, small", [(512, True), (MiB, True), (MiB + 512, False)])
def test_small_pool_is_up_to_1_mib(rounded, small):
    assert is_small(rounded) is small


@pytest.mark.parametrize("rounded, segment", [
    (512, 2 * MiB), (MiB, 2 * MiB),  # small pool: kSmallBuffer
    (MiB + 512, 20 * MiB), (10 * MiB - 512, 20 * MiB),  # under kMinLargeAlloc: kLargeBuffer
    (10 * MiB, 10 * MiB), (10 * MiB + 512, 12 * MiB), (12 * MiB, 12 * MiB),  # kRoundLarge
    (19 * MiB + 512, 20 * MiB), (100 * MiB + 512, 102 * MiB),
])
def test_segment_size(rounded, segment):
    assert segment_size(rounded) == segment


@pytest.mark.parametrize("block, rounded, small, split", [
    (2 * MiB, 2 * MiB - 512, True, True),  # small pool keeps a 512 B rest
    (2 * MiB, 2 * MiB, True, False),
    (20 * MiB, 19 * MiB, False, False),  # large pool: a rest of exactly 1 MiB is not kept
    (20 * MiB, 19 * MiB - 512, False, True),  # 1 MiB + 512 B is
    (12 * MiB, 11 * MiB, False, False),
])
def test_should_split(block, rounded, small, split):
    assert should_split(block, rounded, small) is split


def _run(ops) -> CachingAllocator:
    alloc = CachingAllocator()
    for op in ops:
        if op[0] == "m":
            alloc.malloc(op[1], op[2])
        else:
            alloc.free(op[1])
    return alloc


# name, operations (("m", key, size) / ("f", key)), allocated bytes, reserved bytes, by hand.
SEQUENCES = [
    ("one byte: 512 B block in a 2 MiB small segment", [("m", "a", 1)], 512, 2 * MiB),
    ("zero bytes take nothing", [("m", "a", 0), ("m", "b", 0), ("f", "a")], 0, 0),
    ("two 1 MiB requests fill one small segment",
     [("m", "a", MiB), ("m", "b", MiB)], 2 * MiB, 2 * MiB),
    ("five 512 KiB requests: four per 2 MiB segment, the fifth opens another",
     [("m", i, 512 * KiB) for i in range(5)], 2 * MiB + 512 * KiB, 4 * MiB),
    ("1 MiB + 1 B is large: a 20 MiB segment", [("m", "a", MiB + 1)], MiB + 512, 20 * MiB),
    ("1.5 MiB: a 20 MiB segment, split", [("m", "a", 3 * MiB // 2)], 3 * MiB // 2, 20 * MiB),
    ("12 MiB: its own 12 MiB segment", [("m", "a", 12 * MiB)], 12 * MiB, 12 * MiB),
    ("11 MiB: a 12 MiB segment whose 1 MiB rest is not split off, so 12 MiB allocated",
     [("m", "a", 11 * MiB)], 12 * MiB, 12 * MiB),
    ("19 MiB: a 20 MiB segment, whole", [("m", "a", 19 * MiB)], 20 * MiB, 20 * MiB),
    ("11 MiB, free, 5 MiB: reuses the 12 MiB segment by splitting",
     [("m", "a", 11 * MiB), ("f", "a"), ("m", "b", 5 * MiB)], 5 * MiB, 12 * MiB),
    ("... and 7 MiB then fills the 7 MiB rest exactly",
     [("m", "a", 11 * MiB), ("f", "a"), ("m", "b", 5 * MiB), ("m", "c", 7 * MiB)],
     12 * MiB, 12 * MiB),
    ("thirteen 1.5 MiB share one 20 MiB segment, the last takes the 2 MiB rest whole",
     [("m", i, 3 * MiB // 2) for i in range(13)], 20 * MiB, 20 * MiB),
    ("a fourteenth opens a second 20 MiB segment",
     [("m", i, 3 * MiB // 2) for i in range(14)], 20 * MiB + 3 * MiB // 2, 40 * MiB),
    ("pools are separate: a cached small block does not serve a large request",
     [("m", "a", MiB), ("f", "a"), ("m", "b", 3 * MiB // 2)], 3 * MiB // 2, 22 * MiB),
    ("... nor a cached large block a small one",
     [("m", "a", 3 * MiB // 2), ("f", "a"), ("m", "b", MiB)], MiB, 22 * MiB),
    # a [0, 8) and b [8, 16) in one 20 MiB segment; freeing a leaves holes of 8 and 4 MiB,
    # 12 MiB in all, but no single one fits 10 MiB: a new 10 MiB segment.
    ("fragmentation: 12 MiB free in holes of 8 and 4 MiB, 10 MiB needs a new segment",
     [("m", "a", 8 * MiB), ("m", "b", 8 * MiB), ("f", "a"), ("m", "c", 10 * MiB)],
     18 * MiB, 30 * MiB),
    # freeing b merges the 8 MiB hole, b and the 4 MiB hole into one 20 MiB free block.
    ("merging: freeing b joins both holes, and 16 MiB fits without a new segment",
     [("m", "a", 8 * MiB), ("m", "b", 8 * MiB), ("f", "a"), ("m", "c", 10 * MiB), ("f", "b"),
      ("m", "d", 16 * MiB)], 26 * MiB, 30 * MiB),
    # best fit takes the 4 MiB hole (rest 1 MiB, not split: 4 MiB allocated), not the 8 MiB one.
    ("best fit: 3 MiB goes to the 4 MiB hole, whole, not to the 8 MiB one",
     [("m", "a", 8 * MiB), ("m", "b", 8 * MiB), ("f", "a"), ("m", "c", 3 * MiB)],
     12 * MiB, 20 * MiB),
]


@pytest.mark.parametrize("ops, allocated, reserved", [s[1:] for s in SEQUENCES],
                         ids=[s[0] for s in SEQUENCES])
def test_sequences_by_hand(ops, allocated, reserved):
    alloc = _run(ops)
    assert (alloc.allocated_bytes, alloc.reserved_bytes) == (allocated, reserved)


def test_freed_neighbours_merge_within_a_small_segment():
    alloc = _run([("m", "a", 512 * KiB), ("m", "b", 512 * KiB), ("m", "c", 512 * KiB),
                  ("f", "a"), ("f", "c")])
    [segment] = alloc.segments
    assert segment.is_small and segment.size_bytes == 2 * MiB
    assert segment.blocks == ((512 * KiB, False), (512 * KiB, True), (MiB, False))
    alloc.free("b")
    assert alloc.segments[0].blocks == ((2 * MiB, False),)
    alloc.malloc("d", MiB)  # the merged block serves it from the front
    assert alloc.segments[0].blocks == ((MiB, True), (MiB, False))


def test_equal_free_blocks_tie_by_address():
    alloc = _run([("m", "a", 12 * MiB), ("m", "b", 12 * MiB), ("f", "b"), ("f", "a"),
                  ("m", "c", 12 * MiB)])
    assert [s.blocks for s in alloc.segments] == [((12 * MiB, True),), ((12 * MiB, False),)]
    assert alloc.segments[0].address < alloc.segments[1].address


def test_split_block_layout():
    alloc = _run([("m", "a", 3 * MiB // 2), ("m", "b", 100)])
    large, small = alloc.segments
    assert not large.is_small and large.blocks == ((3 * MiB // 2, True), (37 * MiB // 2, False))
    assert small.is_small and small.blocks == ((512, True), (2 * MiB - 512, False))


def test_peaks():
    alloc = _run([("m", "a", 12 * MiB), ("m", "b", 1), ("f", "a")])
    assert alloc.allocated_bytes == 512
    assert alloc.peak_allocated_bytes == 12 * MiB + 512
    assert alloc.reserved_bytes == alloc.peak_reserved_bytes == 14 * MiB  # never released
    alloc.malloc("c", 12 * MiB)  # reuses the cached 12 MiB segment
    assert alloc.peak_allocated_bytes == 12 * MiB + 512
    assert alloc.peak_reserved_bytes == 14 * MiB


def test_misuse_is_refused():
    alloc = _run([("m", "a", 1), ("m", "z", 0)])
    with pytest.raises(RuntimeError, match="allocated twice"):
        alloc.malloc("a", 1)
    with pytest.raises(RuntimeError, match="allocated twice"):
        alloc.malloc("z", 0)
    with pytest.raises(KeyError):
        alloc.free("never")
    with pytest.raises(ValueError, match="negative"):
        alloc.malloc("n", -1)


def _check_structure(alloc: CachingAllocator) -> None:
    segments = alloc.segments
    assert sum(s.size_bytes for s in segments) == alloc.reserved_bytes
    assert sum(s.allocated_bytes for s in segments) == alloc.allocated_bytes
    for segment in segments:
        assert segment.size_bytes % 512 == 0
        frees = [not allocated for _, allocated in segment.blocks]
        assert not any(a and b for a, b in itertools.pairwise(frees)), "free neighbours unmerged"


def test_long_random_sequence_keeps_invariants():
    rng = random.Random(20240531)
    alloc, live, peak, requested, rounded_sum = CachingAllocator(), [], 0, {}, 0
    for step in range(20_000):
        if live and rng.random() < 0.45:
            key = live.pop(rng.randrange(len(live)))
            alloc.free(key)
            size = requested.pop(key)
            rounded_sum -= round_size(size) if size else 0
        else:
            size = 0 if rng.random() < 0.02 else int(2 ** rng.uniform(0, 26))  # up to 64 MiB
            alloc.malloc(step, size)
            live.append(step)
            requested[step] = size
            rounded_sum += round_size(size) if size else 0
        assert alloc.reserved_bytes >= alloc.allocated_bytes
        assert alloc.allocated_bytes >= rounded_sum  # whole blocks may exceed the request
        peak = max(peak, alloc.allocated_bytes)
        assert alloc.peak_allocated_bytes == peak
        assert alloc.peak_reserved_bytes == alloc.reserved_bytes
        if step % 1000 == 0:
            _check_structure(alloc)
    for key in live:
        alloc.free(key)
    _check_structure(alloc)
    assert alloc.allocated_bytes == 0
    assert all(len(s.blocks) == 1 for s in alloc.segments)  # every segment merged back whole


def test_standard_library_only():
    tree = ast.parse(Path(allocator.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "bisect", "dataclasses"}


def test_a_block_freed_on_one_stream_is_not_reused_by_another():
    """BlockComparatorSize orders pools by stream first: 12 MiB freed on the compute stream
    serves the next compute request, not the gather stream's, which takes a segment of its own."""
    a = CachingAllocator()
    a.malloc("x", 12 << 20)
    a.free("x")
    a.malloc("y", 12 << 20, stream="gather")
    assert a.reserved_bytes == 24 << 20
    a.free("y")
    a.malloc("z", 12 << 20)  # the compute stream's own block again
    assert a.reserved_bytes == 24 << 20
