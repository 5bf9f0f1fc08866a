"""Scenario keys from a Megatron-LM argument list: a file holding pretrain_gpt.py's flags, or a
launch script such as examples/gpt3/train_gpt3_175b_distributed.sh, whose words are split as a
shell splits them (comments dropped); every `--flag` and the words after it are read, and the
shell's other words (variables set, torchrun, the script) are not Megatron's.

Flags and defaults as megatron/training/arguments.py has them (NVIDIA/Megatron-LM d98e8a6):
- the shape: --num-layers, --hidden-size, --num-attention-heads (required, as Megatron requires
  them), --ffn-hidden-size (default 4h, or int(4h x 2/3 / 64) x 64 with --swiglu),
  --group-query-attention with --num-query-groups -> model.kv_heads, --kv-channels ->
  model.head_size, --max-position-embeddings -> model.max_seq_len, --swiglu (else GELU),
  --normalization LayerNorm | RMSNorm, --disable-bias-linear (a LayerNorm keeps its bias),
  --add-qkv-bias, --untie-embeddings-and-output-weights, --position-embedding-type
  learned_absolute | rope, --hidden-dropout and --attention-dropout (0.1; both 0: no dropout
  masks). Q, K and V are one module (Megatron's linear_qkv). The shape replaces the
  scenario's [model]; the vocabulary is --vocab-size or GPT-2's 50,257 under --tokenizer-type
  GPT2BPETokenizer, padded to a multiple of --make-vocab-size-divisible-by (128) x TP as
  vocab_utils.py pads it; any other tokenizer keeps the scenario's model.vocab as written.
- the batch: --micro-batch-size, --seq-length; --global-batch-size gives
  gradient_accumulation = global / (micro x data-parallel ranks), Megatron's
  num_microbatches, once the world is known (absent: 1).
- precision: --fp16 | --bf16 (neither: fp32); the optimizer: --optimizer adam | sgd (with
  --sgd-momentum, default 0.9); --use-distributed-optimizer shards the optimizer states over
  the data-parallel ranks: ZeRO stage 1 (else 0), in the ZeRO paper's accounting
  (training.framework "zero": zerosim has no Megatron class). Under --bf16 Megatron keeps its
  gradient buffer in fp32 (unless --grad-reduce-in-bf16); zerosim counts 16-bit gradients, and
  the note says so.
- recomputation: --recompute-activations (selective), --recompute-granularity full | selective
  (full only with --recompute-method uniform and --recompute-num-layers 1: every layer).
- attention: --use-flash-attn, or --attention-backend flash | fused (true) | unfused | local
  (false); its default "auto" keeps the scenario's training.flash_attention.
- parallelism: --tensor-model-parallel-size, --sequence-parallel, --tp-comm-overlap,
  --pipeline-model-parallel-size (1F1B), --num-layers-per-virtual-pipeline-stage or
  --num-virtual-stages-per-pipeline-rank (interleaved 1F1B, as arguments.py derives
  virtual_pipeline_model_parallel_size). Context and expert parallelism, an uneven pipeline
  and FP8 are refused in one line.
Every other flag is named in the note as not used.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from zerosim.errors import InputError, brief
from zerosim.files import read_text
from zerosim.scenario.launch import Launch, choice, integer

SWITCHES = frozenset((
    "--fp16", "--bf16", "--swiglu", "--sequence-parallel", "--use-distributed-optimizer",
    "--recompute-activations", "--untie-embeddings-and-output-weights", "--group-query-attention",
    "--disable-bias-linear", "--add-qkv-bias", "--use-flash-attn", "--tp-comm-overlap"))
"""Megatron's store_true flags this reader takes: no value follows them."""
GPT2_VOCAB = 50257  # GPT-2's BPE vocabulary (openai gpt2 encoder.json: 50,257 tokens)
REFUSED = ("--context-parallel-size", "--expert-model-parallel-size", "--num-experts",
           "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
           "--pipeline-model-parallel-layout", "--fp8-format")
"""Flags whose run zerosim does not model (given above their default: refused)."""


def argument_words(text: str, origin: str) -> dict[str, list[str]]:
    """{flag: the words after its last occurrence}: --flag=value is --flag value; a quoted
    "--flag value" is split."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    try:
        words = [word for word in lexer if word.strip()]
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise InputError(f"{origin}: cannot split into words: {exc}") from None
    flags: dict[str, list[str]] = {}
    current: list[str] | None = None
    for word in words:
        if word.startswith("--") and len(word) > 2:
            name, _, rest = word.partition("=")
            name, *inline = name.split()
            current = flags[name] = [*inline, *([rest] if rest else []), ]
        elif current is not None:
            current.append(word)
    return flags


class _Args:
    def __init__(self, flags: dict[str, list[str]], launch: Launch):
        self.flags, self.launch, self.used = flags, launch, set()

    def on(self, flag: str) -> bool:
        self.used.add(flag)
        return flag in self.flags

    def text(self, flag: str, default: str | None = None) -> str | None:
        self.used.add(flag)
        if flag not in self.flags:
            return default
        values = self.flags[flag]
        if not values or values[0].startswith("-") and not values[0][1:].isdigit():
            raise self.launch.fail(f"{flag} has no value")
        if values[0].startswith("$"):
            raise self.launch.fail(f"{flag} {values[0]}: a shell variable; write its value")
        return values[0]

    def number(self, flag: str, default: int | None = None, minimum: int = 1) -> int | None:
        value = self.text(flag)
        return default if value is None else integer(self.launch, value, flag, minimum)

    def fraction(self, flag: str, default: float) -> float:
        value = self.text(flag)
        try:
            return default if value is None else float(value)
        except ValueError:
            raise self.launch.fail(f"{flag} must be a number, got {brief(value)}") from None


def read_megatron_args(path: Path) -> Launch:
    text = read_text(path, "Megatron-LM arguments")
    flags = argument_words(text, str(path))
    launch = Launch(origin=str(path), whole_model=True)
    args = _Args(flags, launch)
    for flag in REFUSED:
        value = args.text(flag)
        if value is not None and value not in ("1", "0"):
            raise launch.fail(f"{flag} {value}: not modeled by zerosim")
    tp = args.number("--tensor-model-parallel-size", 1)
    _model(args, tp)
    _training(args)
    _parallelism(args, tp)
    launch.unused = sorted(set(flags) - args.used)
    return launch


def _model(args: _Args, tp: int) -> None:
    launch, m = args.launch, args.launch.tables["model"]
    m["name"] = Path(launch.origin).name
    for flag, key in (("--num-layers", "layers"), ("--hidden-size", "hidden"),
                      ("--num-attention-heads", "heads"),
                      ("--max-position-embeddings", "max_seq_len")):
        m[key] = args.number(flag)
        if m[key] is None:
            raise launch.fail(f"no {flag}: Megatron requires it, and so does the model's shape")
    if args.on("--group-query-attention"):
        m["kv_heads"] = args.number("--num-query-groups", m["heads"])
    if args.text("--kv-channels") is not None:
        m["head_size"] = args.number("--kv-channels")
    m["mlp"] = "swiglu" if args.on("--swiglu") else "gelu"
    default_ffn = int(4 * m["hidden"] * 2 / 3 / 64) * 64 if m["mlp"] == "swiglu" else 4 * m["hidden"]
    m["ffn"] = args.number("--ffn-hidden-size", default_ffn)
    m["norm"] = choice(launch, args.text("--normalization", "LayerNorm"), "--normalization",
                       {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"})
    m["bias"] = not args.on("--disable-bias-linear")
    m["norm_bias"] = True  # Megatron's LayerNorm has its bias whatever the linears do
    if args.on("--add-qkv-bias"):
        m["qkv_bias"] = True
    m["tied_embeddings"] = not args.on("--untie-embeddings-and-output-weights")
    m["position"] = choice(launch, args.text("--position-embedding-type", "learned_absolute"),
                           "--position-embedding-type",
                           {"learned_absolute": "learned", "rope": "rope"})
    dropouts = [args.fraction(flag, 0.1) for flag in ("--hidden-dropout", "--attention-dropout")]
    m["dropout"] = any(p > 0 for p in dropouts)
    m["fused_qkv"] = True
    _vocabulary(args, m, tp)


def _vocabulary(args: _Args, m: dict[str, Any], tp: int) -> None:
    size = args.number("--vocab-size")
    tokenizer = args.text("--tokenizer-type")
    if size is None and tokenizer == "GPT2BPETokenizer":
        size = GPT2_VOCAB
    if size is None:
        args.launch.model_kept = ("vocab",)
        args.launch.kept.append("model.vocab (the arguments name a tokenizer, not its size; "
                                "as written, not padded)")
        return
    multiple = args.number("--make-vocab-size-divisible-by", 128) * tp
    m["vocab"] = -(-size // multiple) * multiple


def _training(args: _Args) -> None:
    launch, t = args.launch, args.launch.tables["training"]
    t["framework"] = "zero"
    for flag, key in (("--micro-batch-size", "micro_batch"), ("--seq-length", "seq_len")):
        value = args.number(flag)
        if value is None:
            launch.kept.append(f"{key} (no {flag})")
        else:
            t[key] = value
    launch.global_batch = args.number("--global-batch-size")
    if launch.global_batch is None:
        t["gradient_accumulation"] = 1
        launch.defaulted.append("gradient_accumulation (1: no --global-batch-size)")
    fp16, bf16 = args.on("--fp16"), args.on("--bf16")
    if fp16 and bf16:
        raise launch.fail("--fp16 and --bf16 are both given; Megatron takes one")
    t["precision"] = "fp16" if fp16 else "bf16" if bf16 else "fp32"
    if bf16 and not args.on("--grad-reduce-in-bf16"):  # arguments.py: bf16 -> fp32 main grads
        launch.unmodeled.append("the fp32 gradient buffer Megatron keeps under --bf16 "
                                "(zerosim counts 16-bit gradients)")
    optimizer = choice(launch, args.text("--optimizer", "adam"), "--optimizer",
                       {"adam": "adam", "sgd": "sgd"})
    if optimizer == "sgd" and args.fraction("--sgd-momentum", 0.9) != 0:
        optimizer = "sgd_momentum"
    t["optimizer"] = optimizer
    t["zero_stage"] = 1 if args.on("--use-distributed-optimizer") else 0
    t["gradient_reduction"] = "reduce_scatter"
    t["activation_checkpointing"] = _recompute(args)
    _attention(args, t)


def _recompute(args: _Args) -> str:
    granularity = args.text("--recompute-granularity")
    if args.on("--recompute-activations"):
        granularity = "selective"  # arguments.py: recompute_activations -> 'selective'
    if granularity is None:
        return "none"
    mode = choice(args.launch, granularity, "--recompute-granularity",
                  {"full": "full", "selective": "selective"})
    method, layers = args.text("--recompute-method"), args.number("--recompute-num-layers")
    if mode == "full" and (method not in (None, "uniform") or layers not in (None, 1)):
        raise args.launch.fail(f"--recompute-granularity full with --recompute-method {method} "
                               f"--recompute-num-layers {layers} is not modeled (zerosim "
                               f"recomputes every layer: uniform, 1)")
    return mode


def _attention(args: _Args, t: dict[str, Any]) -> None:
    backend = args.text("--attention-backend", "auto")
    if args.on("--use-flash-attn"):
        t["flash_attention"] = True
    elif backend == "auto":
        args.launch.kept.append("flash_attention (--attention-backend auto)")
    else:
        t["flash_attention"] = choice(args.launch, backend, "--attention-backend",
                                      {"flash": True, "fused": True, "unfused": False,
                                       "local": False})


def _parallelism(args: _Args, tp: int) -> None:
    launch, p = args.launch, args.launch.tables["parallelism"]
    layers = launch.tables["model"]["layers"]
    pp = args.number("--pipeline-model-parallel-size", 1)
    p.update(tensor_parallel=tp, sequence_parallel=args.on("--sequence-parallel"),
             tp_comm_overlap=args.on("--tp-comm-overlap"), pipeline_parallel=pp)
    per_chunk = args.number("--num-layers-per-virtual-pipeline-stage")
    virtual = args.number("--num-virtual-stages-per-pipeline-rank", 1)
    if per_chunk is not None:
        if layers % pp or layers // pp % per_chunk:
            raise launch.fail(f"--num-layers {layers} / --pipeline-model-parallel-size {pp} / "
                              f"--num-layers-per-virtual-pipeline-stage {per_chunk} is not "
                              f"whole ({layers / pp / per_chunk:g})")
        virtual = layers // pp // per_chunk
    p["pipeline_schedule"] = "interleaved_1f1b" if virtual > 1 else "1f1b"
    p["virtual_stages"] = virtual
