"""What PyTorch FSDP2 really holds in device memory for a Llama-shaped decoder at W-way sharding.

Why: ground truth for an analytic FSDP/ZeRO-3 memory model (sharded params, fp32 grads and AdamW
states, all-gather / reduce-scatter buffers, activations under activation checkpointing) without
W GPUs: one process joins a *fake* process group of size W (torch.testing._internal.distributed.
fake_pg); collectives do nothing but FSDP2 still allocates its communication buffers, so memory
is what rank 0 of a W-GPU job holds; step time is compute only. Imports only torch and stdlib.
`--preset smoke` runs on CPU (CUDA fields null there). --out always gets a JSON list of runs;
model flags given with --preset override its values. Partial results: OUT.PRESET.part.json"""

import argparse, json, os, subprocess, sys, time
from collections import defaultdict

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

# Shapes: Llama-2-7B (Touvron et al. 2023; HF config), Llama-3-8B and Llama-3.2-1B (HF configs).
L2_7B = dict(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000)
L3_8B = dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256)
L_1B = dict(layers=16, hidden=2048, heads=16, kv_heads=8, ffn=8192, vocab=128256)
PRESETS = {
    "llama2_7b_s4096_b2_w8_full": dict(L2_7B, seq=4096, batch=2, world=8, ac="full"),
    "llama2_7b_s4096_b2_w64_full": dict(L2_7B, seq=4096, batch=2, world=64, ac="full"),
    "llama2_7b_s2048_b4_w8_sel": dict(L2_7B, seq=2048, batch=4, world=8, ac="selective_op"),
    "llama3_8b_s4096_b1_w8_none": dict(L3_8B, seq=4096, batch=1, world=8, ac="none"),
    "llama_1b_s2048_b4_w8_none": dict(L_1B, seq=2048, batch=4, world=8, ac="none"),
    "smoke": dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=256, seq=32, batch=2,
                  world=4, ac="full"),
}
DIMS = ("world", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "batch", "ac")
_WRAP = "checkpoint_wrapper(block, NO_REENTRANT, preserve_rng_state=False"
AC_NOTES = {"none": "no activation checkpointing", "full": _WRAP + ") on every block",
            "selective_op": _WRAP + ", context_fn=create_selective_checkpoint_contexts(policy)) "
            "on every block; torchtitan per-op SAC: MUST_SAVE outputs of SAVE_LIST ops (aten.mm, "
            "SDPA, aten.max, reduce_scatter) except every 2nd mm per block; rest PREFER_RECOMPUTE"}
_A = torch.ops.aten  # torchtitan activation_checkpoint.py _save_list (+ CPU flash for smoke)
SAVE_LIST = {_A.mm.default, _A._scaled_dot_product_efficient_attention.default,
             _A._scaled_dot_product_flash_attention.default,
             _A._scaled_dot_product_cudnn_attention.default,
             _A._scaled_dot_product_flash_attention_for_cpu.default, _A.max.default,
             torch.ops._c10d_functional.reduce_scatter_tensor.default}
PEAK_KEYS = dict(max_memory_allocated="allocated_bytes.all.peak", **{k: k for k in (
    "active_bytes.all.peak", "inactive_split_bytes.all.peak", "requested_bytes.all.peak",
    "num_alloc_retries", "num_ooms")}, max_memory_reserved="reserved_bytes.all.peak")


def apply_rope(x, freqs):
    """torchtitan apply_rotary_emb: x (B, S, H, D) rotated by complex freqs (S, D/2)."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs[None, :, None, :]).flatten(3).type_as(x)


class Block(nn.Module):
    """RMSNorm -> GQA attention (RoPE, causal SDPA) + res; RMSNorm -> SwiGLU MLP + res."""

    def __init__(self, c):
        super().__init__()
        h, f, self.nh, self.nkv = c["hidden"], c["ffn"], c["heads"], c["kv_heads"]
        self.hd, kv = h // self.nh, self.nkv * (h // self.nh)
        self.attn_norm, self.ffn_norm = nn.RMSNorm(h, eps=1e-5), nn.RMSNorm(h, eps=1e-5)
        for name, (i, o) in dict(wq=(h, h), wk=(h, kv), wv=(h, kv), wo=(h, h), w1=(h, f),
                                 w3=(h, f), w2=(f, h)).items():
            setattr(self, name, nn.Linear(i, o, bias=False))

    def forward(self, x, freqs):
        b, t, _ = x.shape
        y = self.attn_norm(x)
        q = apply_rope(self.wq(y).view(b, t, self.nh, self.hd), freqs)
        k = apply_rope(self.wk(y).view(b, t, self.nkv, self.hd), freqs)
        v = self.wv(y).view(b, t, self.nkv, self.hd)
        rep = self.nh // self.nkv
        if rep > 1:  # torchtitan repeat_kv: expand + reshape (materialises the repeated k, v)
            k, v = (z[:, :, :, None].expand(b, t, self.nkv, rep, self.hd)
                    .reshape(b, t, self.nh, self.hd) for z in (k, v))
        o = F.scaled_dot_product_attention(*(z.transpose(1, 2) for z in (q, k, v)),
                                           is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, -1))
        y = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Llama(nn.Module):
    """Embedding -> L blocks -> RMSNorm -> untied output projection (logits)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = nn.RMSNorm(c["hidden"], eps=1e-5)
        self.output = nn.Linear(c["hidden"], c["vocab"], bias=False)
        self.register_buffer("freqs", torch.empty(c["seq"], c["hidden"] // c["heads"] // 2,
                                                  dtype=torch.complex64), persistent=False)

    def forward(self, tokens):
        x = self.tok(tokens)
        for blk in self.layers:
            x = blk(x, self.freqs)
        return self.output(self.norm(x))

    @torch.no_grad()
    def init_weights(self):
        """FSDP2 meta-init recipe: called after to_empty(); works on the sharded DTensors."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            elif isinstance(m, nn.RMSNorm):
                nn.init.ones_(m.weight)
        hd, seq = self.c["hidden"] // self.c["heads"], self.c["seq"]
        ang = torch.outer(torch.arange(seq).float(), 1e4 ** (-torch.arange(0, hd, 2) / hd))
        self.freqs.copy_(torch.polar(torch.ones_like(ang), ang))  # torchtitan precompute_freqs_cis


def sac_context_fn():
    """torchtitan per-op selective AC: save listed ops' outputs, recompute every second mm."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
        if func == _A.mm.default:
            meta[key] += 1
        save = func in SAVE_LIST and not (func == _A.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def build(c, dev):
    """Meta build -> AC wrap -> fully_shard blocks then root -> to_empty -> init (torchtitan)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    mesh = init_device_mesh(dev.type, (c["world"],))
    with torch.device("meta"):
        model = Llama(c)
    ac_kw = {"full": {}, "selective_op": dict(context_fn=sac_context_fn)}.get(c["ac"])
    red = torch.bfloat16 if c["reduce_dtype"] == "bf16" else torch.float32
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=red)
    for i, blk in enumerate(model.layers):
        if ac_kw is not None:  # torchtitan wraps every block for AC before sharding it
            blk = model.layers[i] = checkpoint_wrapper(blk, preserve_rng_state=False, **ac_kw)
        raf = c["reshard_last"] or i < len(model.layers) - 1  # torchtitan: last block False
        fully_shard(blk, mesh=mesh, mp_policy=mp, reshard_after_forward=raf)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    model.to_empty(device=dev)
    model.init_weights()
    return model


def snap(dev):
    """allocated / reserved by the caching allocator and device-wide used memory (bytes)."""
    if dev.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(dev)
    return dict(allocated=torch.cuda.memory_allocated(dev),
                reserved=torch.cuda.memory_reserved(dev), device_used=total - free)


def peaks(dev, prev=None):
    """Peak stats since the last reset, max-merged with prev (a running since-start record)."""
    if dev.type != "cuda":
        return None
    s = torch.cuda.memory_stats(dev)
    cur = {k: s.get(v, 0) for k, v in PEAK_KEYS.items()}
    return cur if prev is None else {k: max(cur[k], prev[k]) for k in cur}


def one_step(model, opt, batch, c, dev, rec):
    """zero_grad, forward, fp32 CE loss, backward, clip, AdamW step; snapshots into rec."""
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    logits = model(batch[0])
    loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[1].flatten())  # torchtitan
    del logits
    rec.update(after_forward=snap(dev))  # host-side queries, no device sync
    loss.backward()
    rec.update(after_backward=snap(dev))
    if not c["no_clip"]:
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    opt.step()
    sync()
    dt = time.perf_counter() - t0
    rec.update(after_optimizer=snap(dev))
    return dt, loss.detach().float().item()


def run_steps(model, c, dev, res, save):
    """Measured steps: snapshots, per-step peaks and running since-start peaks."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=not c["fused"], fused=c["fused"])
    gen = torch.Generator().manual_seed(0)  # batch = (tokens, labels), fixed for all steps
    batch = torch.randint(0, c["vocab"], (2, c["batch"], c["seq"]), generator=gen).to(dev)
    for i in range(c["steps"]):
        res["phase"] = f"step {i + 1}"
        if dev.type == "cuda":  # keep the since-start peaks, then measure this step alone
            res["peak_since_start"] = peaks(dev, res["peak_since_start"])
            torch.cuda.reset_peak_memory_stats(dev)
        dt, loss = one_step(model, opt, batch, c, dev, rec := {"step": i + 1})
        tok_s, step_peak = c["batch"] * c["seq"] / dt, peaks(dev)
        gib = step_peak["max_memory_allocated"] / 2**30 if step_peak else float("nan")
        print(f"[{c['name']}] step {i + 1}/{c['steps']}: {dt:.3f}s "
              f"{tok_s:.0f} tok/s loss {loss:.4f} step peak alloc {gib:.2f} GiB", flush=True)
        since = res["peak_since_start"] = peaks(dev, res["peak_since_start"])
        rec.update(seconds=dt, tokens_per_s=tok_s, loss=loss, step_peak=step_peak,
                   since_start_peak=since)
        res["steps"].append(rec)
        res["peak_since_start_after_step1" if i == 0 else "peak_since_start_after_last"] = since
        save()
    res["phase"] = "done"


def run_config(c, out):
    """One configuration in this process; writes [result] to out after every step."""
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dev = torch.device("cuda:0" if (cuda := torch.cuda.is_available()) else "cpu")
    res = dict(config=c, ac_impl=AC_NOTES[c["ac"]], torch=torch.__version__, device=str(dev),
               device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
               oom=False, steps=[], phase="init")

    def save():  # after every step, atomically, so a killed run still leaves its steps
        with open(out + ".tmp", "w") as f:
            json.dump([res], f, indent=1)
        os.replace(out + ".tmp", out)
    if cuda:  # CUDA context baseline: init + set_device + a tiny tensor, before the model
        torch.cuda.init(), torch.cuda.set_device(dev), torch.ones(1, device=dev)
    res["baseline_context"] = snap(dev)
    snapshot = os.environ.get("FSDP2_MEMORY_SNAPSHOT") if cuda else None  # the allocator's
    if snapshot:  # own trace (every alloc and free, stream, segment), no stacks: small
        torch.cuda.memory._record_memory_history(context=None, stacks="python",
                                                 max_entries=1_000_000)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=c["world"])
    save()
    try:
        model = build(c, dev)
        res.update(params_total=sum(p.numel() for p in model.parameters()), after_init=snap(dev),
                   params_local_shard=sum(p.to_local().numel() for p in model.parameters()))
        res["peak_after_init"] = res["peak_since_start"] = peaks(dev)
        save()
        run_steps(model, c, dev, res, save)
    except torch.cuda.OutOfMemoryError as e:
        res.update(oom=True, oom_message=str(e)[:2000], oom_snapshot=snap(dev), oom_step_peak=
                   peaks(dev), oom_since_start_peak=peaks(dev, res.get("peak_since_start")))
        print(f"[{c['name']}] OOM in {res['phase']}", flush=True)
    save()
    if snapshot:
        torch.cuda.memory._dump_snapshot(f"{snapshot}.{c['name']}.pickle")
    dist.destroy_process_group()


def run_presets(names, over, a):
    """Each preset in a fresh subprocess (clean allocator, peaks); failures are recorded."""
    runs = []
    for n in names:
        c = dict(PRESETS[n], **over, name=n)
        out = f"{a.out}.{n}.part.json"  # kept: survives if this parent process is killed
        os.path.exists(out) and os.remove(out)
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--config-json",
                                json.dumps(c), "--out", out], timeout=a.timeout,
                               stderr=subprocess.PIPE, text=True, check=False)
            err = None if p.returncode == 0 else f"rc={p.returncode}: {p.stderr[-3000:]}"
        except subprocess.TimeoutExpired:
            err = f"timeout after {a.timeout}s"
        part = json.loads(open(out).read()) if os.path.exists(out) else [dict(config=c)]
        if err:
            part[0].update(failed=True, error=err)
            print(f"[{n}] FAILED: {err[-500:]}", flush=True)
        runs += part
        with open(a.out, "w") as f:  # rewritten after every preset
            json.dump(runs, f, indent=1)
    return runs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", help="comma list of: " + ",".join(PRESETS))
    for k in DIMS[:-1]:
        ap.add_argument("--" + k.replace("_", "-"), type=int)
    ap.add_argument("--ac", choices=["none", "full", "selective_op"])
    ap.add_argument("--reduce-dtype", choices=["bf16", "fp32"], default="fp32")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per preset")
    for k, h in (("fused", "AdamW fused=True instead of foreach=True"), ("no-clip", ""),
                 ("reshard-last", "reshard_after_forward=True on the last block too")):
        ap.add_argument("--" + k, action="store_true", help=h)
    ap.add_argument("--config-json", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.config_json:
        return run_config(json.loads(a.config_json), a.out)
    over = {k: v for k, v in vars(a).items() if v is not None and k in DIMS + (
        "steps", "reduce_dtype", "fused", "no_clip", "reshard_last")}  # config overrides
    names = a.preset.split(",") if a.preset else []
    if [n for n in names if n not in PRESETS] or (not names and set(DIMS) - set(over)):
        ap.error(f"need all of {DIMS} or --preset from {list(PRESETS)}")
    if not names:
        return run_config(dict(over, name="custom"), a.out)
    runs = run_presets(names, over, a)
    print(f"wrote {len(runs)} run(s) to {a.out}", flush=True)


if __name__ == "__main__":
    main()
