"""What PyTorch's CUDA caching allocator reserves for a sequence of allocations and frees.

The memory timeline counts the bytes a rank's tensors ask for; torch.cuda.max_memory_reserved and
nvidia-smi show the segments that the caching allocator obtained with cudaMalloc to hold them,
which are larger: sizes are rounded, small requests share 2 MiB segments, mid-sized ones share
20 MiB segments, and freed blocks stay cached (possibly too fragmented for the next request).
This module replays that bookkeeping, in pure Python, with no device and no torch.

Every rule names the function of c10/cuda/CUDACachingAllocator.cpp (class DeviceCachingAllocator)
it comes from, read at pytorch/pytorch commit 001074d25084fdb87a799823e395a50f5ec044d3 (a 2.x
main-branch snapshot with expandable segments and the configurable max_split_size). Configuration
is PyTorch's default: max_split_size unlimited, roundup_power2_divisions unset, expandable_segments
off, no garbage_collection_threshold, no memory fraction.

What is left out, on purpose:
- streams only as the caller names them: each has its own pools, as the real pools order free
  blocks by stream first (BlockComparatorSize); no record_stream events (a block used by another
  stream is freed at once);
- no device capacity, so never an OOM and never the cache release that malloc tries before one
  (release_available_cached_blocks, release_cached_blocks); segments are never returned
  (no empty_cache), so reserved bytes only grow;
- no CUDA graph private pools; no CUDA context, cuBLAS workspace or NCCL buffers, which
  nvidia-smi also shows but the allocator does not reserve;
- addresses are synthetic: each new segment starts where the last one ended. They only break ties
  between free blocks of equal size (BlockComparatorSize compares ptr last), where the real
  cudaMalloc addresses might order segments differently.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

# Constants at the top of CUDACachingAllocator.cpp (same values at the commit above).
MIN_BLOCK_SIZE = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
SMALL_SIZE = 1 << 20  # kSmallSize: largest "small" request, 1 MiB
SMALL_BUFFER = 2 << 20  # kSmallBuffer: small requests are packed in 2 MiB segments
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: requests of (1, 10) MiB share a kLargeBuffer
LARGE_BUFFER = 20 << 20  # kLargeBuffer: the 20 MiB segment those share
ROUND_LARGE = 2 << 20  # kRoundLarge: larger requests get a segment rounded up to 2 MiB


def _round_up(size_bytes: int, multiple: int) -> int:
    return -(-size_bytes // multiple) * multiple


def round_size(size_bytes: int) -> int:
    """round_size: at least kMinBlockSize, else up to a multiple of it (the power-of-two
    divisions branch is off by default: roundup_power2_divisions is 0)."""
    return _round_up(max(size_bytes, 1), MIN_BLOCK_SIZE)


def is_small(rounded_bytes: int) -> bool:
    """get_pool: a rounded request of at most kSmallSize goes to the small pool."""
    return rounded_bytes <= SMALL_SIZE


def segment_size(rounded_bytes: int) -> int:
    """get_allocation_size: the cudaMalloc made when no cached block fits."""
    if rounded_bytes <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded_bytes < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return _round_up(rounded_bytes, ROUND_LARGE)


def should_split(block_bytes: int, rounded_bytes: int, small: bool) -> bool:
    """should_split: keep the rest of a block as a free block of its own when it is at least
    kMinBlockSize (small pool) or more than kSmallSize (large pool; the size < max_split_size
    condition always holds at the default unlimited max_split_size). Otherwise the whole block
    is handed out, and counted in allocated bytes."""
    remaining = block_bytes - rounded_bytes
    return remaining >= MIN_BLOCK_SIZE if small else remaining > SMALL_SIZE


class _Block:
    """A piece of one segment: the real Block's size, ptr, allocated flag and its prev/next
    neighbours in the segment (which are set only when the segment was split)."""

    __slots__ = ("address", "allocated", "next", "prev", "size", "small", "stream")

    def __init__(self, address: int, size: int, small: bool, stream: object) -> None:
        self.address = address
        self.size = size
        self.small = small
        self.stream = stream
        self.allocated = False
        self.prev: _Block | None = None
        self.next: _Block | None = None


@dataclass(frozen=True)
class SegmentInfo:
    """One cudaMalloc'd segment as torch.cuda.memory_snapshot would list it: its blocks in address
    order, each as (size_bytes, allocated)."""

    address: int
    size_bytes: int
    is_small: bool
    blocks: tuple[tuple[int, bool], ...]
    stream: object = None
    """The stream whose pool the segment belongs to."""

    @property
    def allocated_bytes(self) -> int:
        return sum(size for size, allocated in self.blocks if allocated)


class CachingAllocator:
    """The default CUDA caching allocator of one device. malloc and free take the caller's key
    for a buffer, as MemoryTimeline.alloc and free do, and malloc the stream it is for: each
    stream has its own pools (a block is reused only by the stream that allocated it)."""

    def __init__(self) -> None:
        # Free cached blocks per pool as (size, address), sorted: BlockPool.blocks ordered by
        # BlockComparatorSize, so the first entry not below (request, 0) is the best fit.
        # One pool per (stream, small): BlockComparatorSize orders by stream first, so a block
        # freed on one stream is never handed to another's request.
        self._free: dict[tuple[object, bool], list[tuple[int, int]]] = {}
        self._blocks: dict[int, _Block] = {}  # every block, free or not, by address
        self._live: dict[object, _Block] = {}
        self._empty: set[object] = set()  # keys of zero-size requests, which take no block
        self._bases: list[int] = []  # address of each segment (always a block's), in order
        self._next_address = 0
        self._allocated_bytes = 0
        self._reserved_bytes = 0
        self._peak_allocated_bytes = 0
        self._peak_reserved_bytes = 0

    @property
    def allocated_bytes(self) -> int:
        """Sum of the sizes of blocks in use: torch.cuda.memory_allocated."""
        return self._allocated_bytes

    @property
    def reserved_bytes(self) -> int:
        """Sum of the segment sizes: torch.cuda.memory_reserved."""
        return self._reserved_bytes

    @property
    def peak_allocated_bytes(self) -> int:
        """torch.cuda.max_memory_allocated since construction."""
        return self._peak_allocated_bytes

    @property
    def peak_reserved_bytes(self) -> int:
        """torch.cuda.max_memory_reserved since construction (equal to reserved_bytes here,
        since segments are never released)."""
        return self._peak_reserved_bytes

    @property
    def segments(self) -> list[SegmentInfo]:
        """Every segment with its blocks, in the order they were reserved (walks every block)."""
        result = []
        for base in self._bases:
            head = block = self._blocks[base]
            blocks = []
            while block is not None:
                blocks.append((block.size, block.allocated))
                block = block.next
            result.append(SegmentInfo(address=head.address, size_bytes=sum(s for s, _ in blocks),
                                      is_small=head.small, blocks=tuple(blocks),
                                      stream=head.stream))
        return result

    def malloc(self, key: object, size_bytes: int, stream: object = "compute") -> None:
        """DeviceCachingAllocator::malloc: round, pick the pool, take the best-fitting cached
        block (get_free_block) or a new segment (alloc_block), then split it (alloc_found_block).
        A zero-size request takes no memory (NativeCachingAllocator::allocate skips malloc)."""
        if key in self._live or key in self._empty:
            raise RuntimeError(f"buffer {key!r} allocated twice")
        if size_bytes < 0:
            raise ValueError(f"buffer {key!r}: negative size {size_bytes}")
        if size_bytes == 0:
            self._empty.add(key)
            return
        size = round_size(size_bytes)
        small = is_small(size)
        block = self._take_free_block(size, small, stream)
        if block is None:
            block = self._new_segment(segment_size(size), small, stream)
        if should_split(block.size, size, small):
            self._split(block, size)
        block.allocated = True
        self._live[key] = block
        self._allocated_bytes += block.size
        self._peak_allocated_bytes = max(self._peak_allocated_bytes, self._allocated_bytes)

    def free(self, key: object) -> None:
        """DeviceCachingAllocator::free then free_block: the block goes back to its pool's cache,
        merged with its free neighbours in the segment (try_merge_blocks on prev, then next)."""
        if key in self._empty:
            self._empty.remove(key)
            return
        block = self._live.pop(key)
        block.allocated = False
        self._allocated_bytes -= block.size
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                self._merge(block, neighbour)
        insort(self._pool(block), (block.size, block.address))

    def _pool(self, block: _Block) -> list[tuple[int, int]]:
        return self._free.setdefault((block.stream, block.small), [])

    def _take_free_block(self, size: int, small: bool, stream: object) -> _Block | None:
        """get_free_block: the smallest cached block of at least `size` bytes, ties by lowest
        address (lower_bound in BlockComparatorSize order); the max_split_size checks there never
        refuse a block at the default unlimited max_split_size."""
        free = self._free.setdefault((stream, small), [])
        index = bisect_left(free, (size, -1))
        if index == len(free):
            return None
        _, address = free.pop(index)
        return self._blocks[address]

    def _new_segment(self, size: int, small: bool, stream: object) -> _Block:
        """alloc_block: cudaMalloc a segment of get_allocation_size bytes; reserved grows by it."""
        block = _Block(self._next_address, size, small, stream)
        self._next_address += size
        self._blocks[block.address] = block
        self._bases.append(block.address)
        self._reserved_bytes += size
        self._peak_reserved_bytes = max(self._peak_reserved_bytes, self._reserved_bytes)
        return block

    def _split(self, block: _Block, size: int) -> None:
        """alloc_found_block with split_remainder: the front `size` bytes are handed out and the
        remainder, after them in the same segment, is cached in the pool."""
        remaining = _Block(block.address + size, block.size - size, block.small, block.stream)
        remaining.prev, remaining.next = block, block.next
        if block.next is not None:
            block.next.prev = remaining
        block.next = remaining
        block.size = size
        self._blocks[remaining.address] = remaining
        insort(self._pool(block), (remaining.size, remaining.address))

    def _merge(self, block: _Block, neighbour: _Block) -> None:
        """try_merge_blocks: `block` absorbs a free neighbour, which leaves the pool's cache."""
        free = self._pool(block)
        del free[bisect_left(free, (neighbour.size, neighbour.address))]
        del self._blocks[neighbour.address]
        if neighbour is block.prev:
            del self._blocks[block.address]
            block.address = neighbour.address
            block.prev = neighbour.prev
            if block.prev is not None:
                block.prev.next = block
            self._blocks[block.address] = block
        else:
            block.next = neighbour.next
            if block.next is not None:
                block.next.prev = block
        block.size += neighbour.size
