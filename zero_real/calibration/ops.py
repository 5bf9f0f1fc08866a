"""Op microbenchmarks: each constant of zerosim's op model (zerosim/sim/op_costs.py) measured on
this box by a microbenchmark of its own, on the device and in the dtype a run uses, each op run
as zero_real's model runs it (issue 31's design, "Raw measurements"). One function per kind:

    gemm       torch.mm over a grid of (m, n, k): the scenario's linears in each of their three
               GEMMs (forward, dX, dW) at its tokens and widths scaled, and squares beyond
    linear     nn.Linear forward and backward: what a linear costs beyond its GEMMs
    launch     x.add_(1) in a loop (dispatch and launch per op); the backward of a chain of
               scalar additions per autograd node (AddBackward0 runs no kernel: the node alone)
    attention  Block.attention's own code between its two linears, by sequence length
    memory_op  the memory-bound ops the op model prices (hardware.op_model.MEMORY_OPS), by size
    copy_host  host <-> device copies, pinned and pageable (CUDA only)

Every row carries the world size, the rank's threads (ranks share a CPU box's cores), the dtype
and the device; times are medians in seconds of a call, timed by every rank at once
(timing.until). A sample repeats a call until it lasts SAMPLE_S, so that a microsecond op is not
timed with the clock's and a synchronize's own cost. zerosim/calibration/fit_ops.py fits them.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from zero_real.calibration.timing import max_over_ranks, sync, until
from zero_real.parts.model import Block, Embedding, _norm, _rope
from zero_real.run.progress import Progress
from zero_real.stages import DTYPES
from zerosim.hardware.op_model import MEMORY_OPS
from zerosim.units import MiB

OP_TARGET_S = 0.02  # per row: ~100 rows a world in a few seconds (bench.compute's units: 0.05)
SAMPLE_S, MAX_REPEATS = 1e-3, 1000
CHAIN_OPS = 256  # autograd nodes per chain: the leaf's one AccumulateGrad is 0.4% of them
# Device-dependent ranges (design, issue 31): a CPU grid that takes seconds, a GPU's up to the
# sizes where its GEMMs and attention reach their plateau.
GEMM_SQUARES = {"cpu": (16, 1024), "cuda": (256, 16384)}
ATTENTION_SEQS = {"cpu": (16, 256), "cuda": (512, 8192)}
SCORES_BYTES = {"cpu": 256 * MiB, "cuda": 8 * 1024 * MiB}  # the math kernel's s x s, at most
HOST_COPY_BYTES = tuple(MiB * 4**k for k in range(5))  # 1 .. 256 MiB
# (tokens, widths) scales: the held-out runs change hidden x0.5 and x2, the sequence and the
# micro-batch; each kind's sizes span them and beyond.
GEMM_SCALES = ((0.5, 0.5), (1, 1), (2, 1), (1, 2), (2, 2), (4, 1))
LINEAR_SCALES = ((0.5, 0.5), (1, 1), (2, 2))
MEMORY_SCALES = ((0.5, 0.5), (1, 1), (2, 2), (4, 2), (4, 4), (8, 8))
# Past these elements (tokens x width) only the scenario's own size is kept: the largest makes
# the bytes outweigh a CPU op's overhead (else noise can hide the slope), within memory.
MEMORY_ELEMENTS = {"cpu": 2**22, "cuda": 2**28}
ATTENTION_WIDTHS = (1, 2)  # head sizes: the scenario's, and hidden x2's
DROPOUT_P = 0.1  # transformers' GPT2Config.resid_pdrop; Megatron-LM arguments.py --hidden-dropout
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclasses.dataclass(frozen=True)
class OpBench:
    """What every row of one rank shares: its world, device, dtype and progress."""

    processes: int
    device: torch.device
    dtype: torch.dtype
    progress: Progress

    def row(self, kind: str, **fields) -> dict:
        return {"processes": self.processes, "threads": torch.get_num_threads(),
                "dtype": DTYPE_NAMES[self.dtype], "device": self.device.type, "kind": kind,
                **fields}

    def tensor(self, *shape: int, grad: bool = False) -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=self.dtype, requires_grad=grad)

    def passes(self, prepare, forward, backward: bool = True) -> dict:
        """Median seconds of one forward call (`forward(*prepare())`) and of its backward from
        a ones gradient (None without), with the samples and calls per sample. Inputs are made
        outside the clock, fresh leaves for each call: no gradient accumulates into them (the
        parameters' do, as into a stage's flat buffer)."""
        device = self.device

        def sample(repeats: int) -> tuple[float, float]:
            inputs = [prepare() for _ in range(repeats)]
            forward_s, outs = _clocked(lambda: [forward(*x) for x in inputs], device)
            if not backward:
                return forward_s / repeats, 0.0
            grads = [torch.ones_like(out) for out in outs]
            backward_s, _ = _clocked(lambda: [torch.autograd.backward(out, grad)
                                              for out, grad in zip(outs, grads)], device)
            return forward_s / repeats, backward_s / repeats

        sample(1)  # the first call pays one-time costs (a kernel's setup)
        slowest = max_over_ranks([sum(sample(1))], device)[0]
        repeats = min(MAX_REPEATS, max(1, math.ceil(SAMPLE_S / max(slowest, 1e-9))))
        samples = until(lambda: sample(repeats), lambda s: repeats * (s[0] + s[1]), device,
                        OP_TARGET_S)
        forward_s, backward_s = zip(*samples)
        return {"forward_s": statistics.median(forward_s),
                "backward_s": statistics.median(backward_s) if backward else None,
                "iterations": len(samples), "repeats": repeats}


def _clocked(fn, device) -> tuple[float, object]:
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return time.perf_counter() - start, result


def _scaled(m, width_scale: float, seq: int):
    """The scenario's model at width_scale of its head size (so heads still divide hidden; even
    under rope, which rotates pairs), the MLP likewise, positions for `seq` tokens."""
    step = 2 if m.position == "rope" else 1
    head_dim = max(step, step * round(m.head_dim * width_scale / step))
    return dataclasses.replace(
        m, hidden=m.heads * head_dim, ffn=None if m.ffn is None else round(m.ffn * width_scale),
        max_seq_len=None if m.max_seq_len is None else max(m.max_seq_len, seq))


def _seq(t, token_scale: float) -> int:
    return max(1, round(t.seq_len * token_scale))


def linear_shapes(m) -> list[tuple[int, int]]:
    """(n_in, n_out) of a block's linears (qkv, proj, MLP up [and gate], down)."""
    return [(m.hidden, m.hidden + 2 * m.kv_width), (m.hidden, m.hidden),
            (m.hidden, m.ffn_width), (m.ffn_width, m.hidden)]


def gemm_shapes(scenario, device_type: str) -> list[tuple[int, int, int]]:
    """(m, n, k): every linear of the model and the head, forward (tokens x n_in)(n_in x
    n_out), dX (tokens x n_out)(n_out x n_in) and dW (n_out x tokens)(tokens x n_in), at
    GEMM_SCALES of tokens and widths; squares over GEMM_SQUARES. Past the squares' largest
    FLOPs only the scenario's own shapes are kept (a CPU grid must stay seconds long)."""
    m, t = scenario.model, scenario.training
    lo, hi = GEMM_SQUARES[device_type]
    shapes = {(d, d, d) for d in (2**i for i in range(lo.bit_length() - 1, hi.bit_length()))}
    for token_scale, width_scale in GEMM_SCALES:
        seq = _seq(t, token_scale)
        model, tokens = _scaled(m, width_scale, seq), t.micro_batch * seq
        for n_in, n_out in [*linear_shapes(model), (model.hidden, model.vocab)]:
            for shape in ((tokens, n_out, n_in), (tokens, n_in, n_out), (n_out, n_in, tokens)):
                if (token_scale, width_scale) == (1, 1) or math.prod(shape) <= hi**3:
                    shapes.add(shape)
    return sorted(shapes, key=lambda s: (math.prod(s), s))


def gemm(bench: OpBench, scenario) -> list[dict]:
    shapes = gemm_shapes(scenario, bench.device.type)
    units = {}
    if bench.device.type == "cuda":  # the waves' width the fit fixes (fit_ops: _record)
        units = {"sm_count": torch.cuda.get_device_properties(bench.device).multi_processor_count}
    bench.progress.begin("gemm", len(shapes))
    rows = []
    for m, n, k in shapes:
        a, b = bench.tensor(m, k), bench.tensor(k, n)
        times = bench.passes(lambda: (a, b), torch.mm, backward=False)
        rows.append(bench.row("gemm", m=m, n=n, k=k, time_s=times["forward_s"], **units,
                              iterations=times["iterations"], repeats=times["repeats"]))
        bench.progress.tick(f"{m}x{n}x{k}")
    return rows


def _with_grads(module: nn.Module, bench: OpBench) -> nn.Module:
    module = module.to(device=bench.device, dtype=bench.dtype)
    for p in module.parameters():
        p.grad = torch.zeros_like(p)  # accumulated in place, as into a stage's flat buffer
    return module


def linear(bench: OpBench, scenario) -> list[dict]:
    m, t = scenario.model, scenario.training
    cases = [(t.micro_batch * _seq(t, ts), n_in, n_out) for ts, ws in LINEAR_SCALES
             for n_in, n_out in linear_shapes(_scaled(m, ws, _seq(t, ts)))]
    bench.progress.begin("linear", len(cases))
    rows = []
    for tokens, n_in, n_out in cases:
        layer = _with_grads(nn.Linear(n_in, n_out, bias=m.bias), bench)
        x = bench.tensor(tokens, n_in)
        times = bench.passes(lambda: (x.detach().requires_grad_(),), layer)
        rows.append(bench.row("linear", tokens=tokens, n_in=n_in, n_out=n_out, bias=m.bias,
                              **times))
        bench.progress.tick(f"{tokens}x{n_in}->{n_out}")
    return rows


def _chain(x: torch.Tensor) -> torch.Tensor:
    for _ in range(CHAIN_OPS):
        x = x + 1
    return x


def launch(bench: OpBench, scenario) -> list[dict]:
    """Per op: x.add_(1) on one element, back to back; per autograd node: the backward of a
    chain of CHAIN_OPS additions of a scalar, whose nodes pass the gradient on unchanged, less
    that of one addition; per backward call: the one addition's backward less its node (the
    engine's setup, which every op's backward row below pays once)."""
    bench.progress.begin("launch", 1)
    x = bench.tensor(1)
    per_op = bench.passes(lambda: (x,), lambda y: y.add_(1), backward=False)
    chain = bench.passes(lambda: (bench.tensor(1, grad=True),), _chain)
    single = bench.passes(lambda: (bench.tensor(1, grad=True),), lambda y: y + 1)
    # the chain's nodes past the first, per node; what one call costs beyond its one node
    node_s = max(0.0, chain["backward_s"] - single["backward_s"]) / (CHAIN_OPS - 1)
    row = bench.row("launch", per_op_s=per_op["forward_s"], autograd_node_s=node_s,
                    backward_call_s=max(0.0, single["backward_s"] - node_s),
                    chain_ops=CHAIN_OPS, chain_forward_s=chain["forward_s"],
                    chain_backward_s=chain["backward_s"], single_backward_s=single["backward_s"],
                    iterations=per_op["iterations"] + chain["iterations"] + single["iterations"])
    bench.progress.tick("add_ and autograd chain")
    return [row]


def attention_shapes(scenario, device_type: str) -> list[tuple[float, int]]:
    """(width scale, sequence length): ATTENTION_SEQS and the scenario's own and twice it, at
    each of ATTENTION_WIDTHS, but the math kernel's score matrices past SCORES_BYTES."""
    m, t = scenario.model, scenario.training
    lo, hi = ATTENTION_SEQS[device_type]
    seqs = sorted({*(2**i for i in range(lo.bit_length() - 1, hi.bit_length())),
                   t.seq_len, 2 * t.seq_len})
    if not t.flash_attention:
        seqs = [s for s in seqs if s == t.seq_len  # the scenario trains at its own length
                or t.micro_batch * m.heads * s * s * 4 <= SCORES_BYTES[device_type]]
    return [(ws, s) for ws in ATTENTION_WIDTHS for s in seqs]


class _Handed(nn.Module):
    """Block.qkv's stand-in: hands on the tensor given before the call (the qkv projection's
    output, a fresh leaf), so that Block.attention runs from there on as in the model."""

    def __init__(self):
        super().__init__()
        self.out: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out


def attention_core(model, flash: bool, batch: int, seq: int):
    """Block.attention between its two linears, as a call on the qkv projection's output: the
    model's own code (split, view, transpose, SDPA causal under the kernels `flash` picks,
    transpose, reshape), its qkv projection handing on that output and its output projection an
    identity. Without rope: rotary has rows of its own (memory_op), which the op model prices
    apart (sim/op_costs.layer_memory_ops)."""
    with torch.device("meta"):
        block = Block(model, flash)
        shape = torch.empty(batch, seq, model.hidden)  # only its shape is read
    block.qkv, block.proj = _Handed(), nn.Identity()
    block.rope = False

    def run(qkv: torch.Tensor) -> torch.Tensor:
        block.qkv.out = qkv
        return block.attention(shape)
    return run


def attention(bench: OpBench, scenario) -> list[dict]:
    m, t = scenario.model, scenario.training
    kernel = "flash" if t.flash_attention else "math"
    cases = attention_shapes(scenario, bench.device.type)
    bench.progress.begin("attention", len(cases))
    rows = []
    for width_scale, seq in cases:
        model = _scaled(m, width_scale, seq)
        core = attention_core(model, t.flash_attention, t.micro_batch, seq)
        qkv = bench.tensor(t.micro_batch, seq, model.hidden + 2 * model.kv_width)
        times = bench.passes(lambda: (qkv.detach().requires_grad_(),), core)
        rows.append(bench.row("attention", kernel=kernel, batch=t.micro_batch, heads=m.heads,
                              kv_heads=m.n_kv_heads, seq=seq, head_dim=model.head_dim, **times))
        bench.progress.tick(f"{kernel} seq {seq} head_dim {model.head_dim}")
    return rows


def _memory_case(bench: OpBench, m, op: str, batch: int, seq: int, vocab: int):
    """(shape fields, prepare, forward, has a backward) of one memory-bound op on batch x seq
    tokens of model m (already scaled); cross-entropy over `vocab` logits."""
    tokens, h, f = batch * seq, m.hidden, m.ffn_width

    def leaves(*shape, count=1):
        xs = [bench.tensor(*shape) for _ in range(count)]
        return lambda: tuple(x.detach().requires_grad_() for x in xs)

    if op == "norm":
        layer = _with_grads(_norm(m), bench)
        return {"width": h}, leaves(tokens, h), layer, True
    if op in ("residual", "swiglu"):
        width = h if op == "residual" else f
        forward = torch.add if op == "residual" else (lambda a, b: F.silu(a) * b)
        return {"width": width}, leaves(tokens, width, count=2), forward, True
    if op in ("gelu", "dropout"):
        width = f if op == "gelu" else h
        forward = F.gelu if op == "gelu" else (lambda x: F.dropout(x, DROPOUT_P, training=True))
        return {"width": width}, leaves(tokens, width), forward, True
    if op == "rotary":
        return ({"width": m.heads * m.head_dim, "head_dim": m.head_dim},
                leaves(batch, m.heads, seq, m.head_dim), _rope, True)
    if op == "embedding":
        layer = _with_grads(Embedding(m), bench)
        for p in layer.parameters():
            nn.init.normal_(p.detach())  # the module's own weights come uninitialised
        idx = torch.randint(0, m.vocab, (batch, seq), device=bench.device)
        return {"width": h, "vocab": m.vocab}, lambda: (idx,), layer, True
    if op == "cross_entropy":  # as Head.forward: the loss in fp32 whatever the dtype
        targets = torch.randint(0, vocab, (tokens,), device=bench.device)
        return ({"width": vocab, "vocab": vocab}, leaves(tokens, vocab),
                lambda logits: F.cross_entropy(logits.float(), targets), True)
    assert op == "copy", op
    x = bench.tensor(tokens, h)
    return {"width": h}, lambda: (x,), torch.clone, False


def memory_op(bench: OpBench, scenario) -> list[dict]:
    """Each op zerosim prices as memory-bound (hardware.op_model.MEMORY_OPS) at MEMORY_SCALES."""
    m, t = scenario.model, scenario.training
    widest = max(m.hidden, m.ffn_width, m.vocab)
    cases = [(op, ts, ws) for op in MEMORY_OPS for ts, ws in MEMORY_SCALES
             if (ts, ws) == (1, 1) or t.micro_batch * _seq(t, ts) * widest * ws
             <= MEMORY_ELEMENTS[bench.device.type]]
    bench.progress.begin("memory_op", len(cases))
    rows = []
    for op, token_scale, width_scale in cases:
        seq = _seq(t, token_scale)
        vocab = max(1, round(m.vocab * width_scale))  # cross-entropy's bytes spread as far
        shape, prepare, forward, backward = _memory_case(bench, _scaled(m, width_scale, seq), op,
                                                         t.micro_batch, seq, vocab)
        times = bench.passes(prepare, forward, backward)
        rows.append(bench.row("memory_op", op=op, tokens=t.micro_batch * seq, **shape, **times))
        bench.progress.tick(f"{op} {t.micro_batch * seq}x{shape['width']}")
    return rows


def copy_host(bench: OpBench, scenario) -> list[dict]:
    """dst.copy_(src) between the host and the device, HOST_COPY_BYTES, pinned or pageable."""
    if bench.device.type != "cuda":
        return []
    cases = [(d, pinned, n) for d in ("h2d", "d2h") for pinned in (True, False)
             for n in HOST_COPY_BYTES]
    bench.progress.begin("copy_host", len(cases))
    rows = []
    for direction, pinned, nbytes in cases:
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        gpu = torch.empty(nbytes, dtype=torch.uint8, device=bench.device)
        src, dst = (host, gpu) if direction == "h2d" else (gpu, host)
        times = bench.passes(lambda: (), lambda: dst.copy_(src), backward=False)
        rows.append(bench.row("copy_host", direction=direction, pinned=pinned, bytes=nbytes,
                              time_s=times["forward_s"], iterations=times["iterations"],
                              repeats=times["repeats"]))
        bench.progress.tick(f"{direction} {'pinned' if pinned else 'pageable'} {nbytes} B")
    return rows


KINDS = (gemm, linear, launch, attention, memory_op, copy_host)


def measure_ops(n: int, cfg, device: torch.device, progress: Progress) -> list[dict]:
    """Every kind's rows for one rank of a world of n processes (bench.measure_world)."""
    scenario = cfg.scenario
    bench = OpBench(n, device, DTYPES[scenario.training.precision], progress)
    return [row for kind in KINDS for row in kind(bench, scenario)]
