#!/usr/bin/env python3
"""Measure vLLM-shaped forward-pass step times on one GPU with random bf16 weights.

What it times (all with CUDA events; warm-up, then the median of several repeats):

* ceilings: an 8192^3 bf16 matmul and a large device-to-device copy;
* gemm.csv: ``F.linear`` (cuBLAS, the same call vLLM's unquantized linear layers make) for
  every linear shape of the models (QKV, O, gate_up, down, LM head) at M in 1..8192 rows,
  each captured in a CUDA graph and cycled over enough weight copies that the weights
  do not sit in the 60 MB L2;
* attn.csv: one layer of attention per SDPA backend (flash, cudnn, efficient), decode
  (one query token over a dense KV cache of T keys per sequence; the 4 query heads that
  share a KV head are packed as 4 query rows, as FlashAttention's pack-GQA does) and
  causal prefill (no prior context);
* steps.csv: whole engine steps -- embedding, every decoder layer (fused add+RMSNorm, QKV
  GEMM, neox RoPE, KV-cache write, attention, O GEMM, add+RMSNorm, gate_up GEMM,
  SiLU*mul, down GEMM), final norm, the LM head over the sampled rows only and a greedy
  sample -- captured in one CUDA graph, plus the same step launched eagerly, plus (for
  the models named in --breakdown) each stage timed alone over all layers.

The weights are random (no downloads); the shapes are those of the models' config.json
(the same numbers as crates/twin-cost/src/model.rs). Norm, RoPE and SiLU*mul run as
small Triton kernels standing in for vLLM's fused custom ops when Triton passes a
self-check, else as plain torch ops (env.csv says which).

    python3 bench/device/step_timings.py --out "$OUT"            # on the GPU
    python3 bench/device/step_timings.py --dry-run --out /tmp/x  # tiny model on the CPU
"""

import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import time
import traceback

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# Models (config.json facts; TP1)
# ---------------------------------------------------------------------------------------------

MODELS = {
    "llama-3.1-8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128,
                         inter=14336, vocab=128256, qkv_bias=False, rope_theta=500000.0,
                         eps=1e-5),
    "qwen2.5-7b": dict(hidden=3584, layers=28, heads=28, kv_heads=4, head_dim=128,
                       inter=18944, vocab=152064, qkv_bias=True, rope_theta=1000000.0,
                       eps=1e-6),
    "llama-3.1-70b": dict(hidden=8192, layers=80, heads=64, kv_heads=8, head_dim=128,
                          inter=28672, vocab=128256, qkv_bias=False, rope_theta=500000.0,
                          eps=1e-5),
    # --dry-run only
    "tiny": dict(hidden=256, layers=2, heads=4, kv_heads=2, head_dim=64, inter=512,
                 vocab=1000, qkv_bias=True, rope_theta=10000.0, eps=1e-6),
}

DEV = torch.device("cpu")
CUDA = False
DTYPE = torch.bfloat16
T0 = time.time()
DEADLINE = float("inf")
LOG_LINES = []


def log(*a):
    line = " ".join(str(x) for x in a)
    print(f"[{time.time() - T0:7.1f}s] {line}", flush=True)


def time_left():
    return DEADLINE - time.time()


def linear_shapes(c):
    """(name, N, K) of the four per-layer linears and the LM head (weight is [N, K])."""
    h, d = c["hidden"], c["head_dim"]
    return [
        ("qkv", (c["heads"] + 2 * c["kv_heads"]) * d, h),
        ("o", c["heads"] * d, h),
        ("gate_up", 2 * c["inter"], h),
        ("down", h, c["inter"]),
        ("lm_head", c["vocab"], h),
    ]


class CsvOut:
    """A CSV written row by row (flushed), so a run cut short still returns its rows."""

    def __init__(self, path, fields):
        self.f = open(path, "w", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=fields, extrasaction="ignore")
        self.w.writeheader()
        self.f.flush()

    def row(self, **kv):
        out = {}
        for k, v in kv.items():
            if isinstance(v, float):
                out[k] = f"{v:.6g}"
            else:
                out[k] = v
        self.w.writerow(out)
        self.f.flush()


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def sync():
    if CUDA:
        torch.cuda.synchronize()


def _elapsed_ms(fn):
    """One timed call of fn (events on the GPU, perf_counter on the CPU)."""
    if CUDA:
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1)
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


GRAPH_FAILURES = []


def time_fn(fn, *, graph=True, target_ms=1.5, max_inner=256, inner_multiple=1, reps=7,
            warmup=2):
    """Median and min ms per call of fn. On the GPU the calls are captured in a CUDA graph
    (`inner` calls per replay, enough for ~target_ms) and timed per replay with events.
    Returns (median_ms, min_ms, inner, mode)."""
    for _ in range(warmup):
        fn()
    sync()
    est = max(_elapsed_ms(fn), 1e-3)
    inner = max(1, min(max_inner, math.ceil(target_ms / est)))
    inner = max(inner_multiple, inner - inner % inner_multiple if inner_multiple > 1 else inner)
    if CUDA and graph:
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn()
            torch.cuda.current_stream().wait_stream(s)
            sync()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(inner):
                    fn()
            g.replay()
            g.replay()
            sync()
            ts = [_elapsed_ms(g.replay) / inner for _ in range(reps)]
            del g
            return statistics.median(ts), min(ts), inner, "graph"
        except Exception as e:  # fall back to eager timing, say so
            GRAPH_FAILURES.append(repr(e)[:200])
            log("graph capture failed, timing eagerly:", repr(e)[:200])
            sync()

    def loop():
        for _ in range(inner):
            fn()

    ts = [_elapsed_ms(loop) / inner for _ in range(reps)]
    return statistics.median(ts), min(ts), inner, "eager"


# ---------------------------------------------------------------------------------------------
# Fused elementwise kernels (vLLM's custom ops stand-ins): Triton, else torch
# ---------------------------------------------------------------------------------------------

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except Exception:  # pragma: no cover
    HAVE_TRITON = False

if HAVE_TRITON:

    @triton.jit
    def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, out_ptr, rout_ptr, n_cols, eps,
                            BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        s = x + r
        tl.store(rout_ptr + row * n_cols + cols, s.to(rout_ptr.dtype.element_ty), mask=mask)
        var = tl.sum(s * s, axis=0) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * n_cols + cols, (s * rstd * w).to(out_ptr.dtype.element_ty),
                 mask=mask)

    @triton.jit
    def _silu_mul_kernel(gu_ptr, out_ptr, n_inter, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_inter
        g = tl.load(gu_ptr + row * 2 * n_inter + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(gu_ptr + row * 2 * n_inter + n_inter + cols, mask=mask,
                    other=0.0).to(tl.float32)
        y = g / (1.0 + tl.exp(-g)) * u
        tl.store(out_ptr + row * n_inter + cols, y.to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _rope_kernel(qkv_ptr, pos_ptr, cos_ptr, sin_ptr, row_stride, HALF: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        pos = tl.load(pos_ptr + t)
        offs = tl.arange(0, HALF)
        c = tl.load(cos_ptr + pos * HALF + offs)
        s = tl.load(sin_ptr + pos * HALF + offs)
        base = qkv_ptr + t * row_stride + h * 2 * HALF
        x1 = tl.load(base + offs).to(tl.float32)
        x2 = tl.load(base + HALF + offs).to(tl.float32)
        tl.store(base + offs, (x1 * c - x2 * s).to(qkv_ptr.dtype.element_ty))
        tl.store(base + HALF + offs, (x2 * c + x1 * s).to(qkv_ptr.dtype.element_ty))


def add_rmsnorm_torch(x, r, w, eps):
    s = x + r
    return F.rms_norm(s, (s.shape[-1],), w, eps), s


def silu_mul_torch(gu):
    i = gu.shape[-1] // 2
    return F.silu(gu[:, :i]) * gu[:, i:]


def rope_torch(qkv, pos, cos, sin, n_rot_heads, head_dim):
    """neox RoPE, in place, on the first n_rot_heads heads of each qkv row."""
    t = qkv.shape[0]
    half = head_dim // 2
    x = qkv[:, : n_rot_heads * head_dim].view(t, n_rot_heads, head_dim)
    c = cos[pos].unsqueeze(1)
    s = sin[pos].unsqueeze(1)
    x1 = x[..., :half].float()
    x2 = x[..., half:].float()
    x.copy_(torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1))


def add_rmsnorm_triton(x, r, w, eps):
    t, n = x.shape
    out = torch.empty_like(x)
    rout = torch.empty_like(x)
    block = triton.next_power_of_2(n)
    _add_rmsnorm_kernel[(t,)](x, r, w, out, rout, n, eps, BLOCK=block,
                              num_warps=8 if block >= 4096 else 4)
    return out, rout


def silu_mul_triton(gu):
    t, n2 = gu.shape
    i = n2 // 2
    out = torch.empty((t, i), dtype=gu.dtype, device=gu.device)
    block = 1024
    _silu_mul_kernel[(t, triton.cdiv(i, block))](gu, out, i, BLOCK=block, num_warps=4)
    return out


def rope_triton(qkv, pos, cos, sin, n_rot_heads, head_dim):
    t = qkv.shape[0]
    _rope_kernel[(t, n_rot_heads)](qkv, pos, cos, sin, qkv.stride(0), HALF=head_dim // 2,
                                   num_warps=1)


OPS = dict(add_rmsnorm=add_rmsnorm_torch, silu_mul=silu_mul_torch, rope=rope_torch,
           name="torch")


def rel_err(a, b):
    a = a.double()
    b = b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def check_fused_kernels(dtype):
    """Compare the Triton kernels with the torch ops; use them only if they agree."""
    if not HAVE_TRITON:
        return "torch (no triton)"
    if not CUDA and os.environ.get("TRITON_INTERPRET") != "1":
        return "torch (cpu)"
    try:
        g = torch.Generator(device=DEV).manual_seed(1)
        t, h, heads, d, inter = 37, 384, 5, 64, 700
        x = torch.randn(t, h, device=DEV, generator=g).to(dtype)
        r = torch.randn(t, h, device=DEV, generator=g).to(dtype)
        w = torch.randn(h, device=DEV, generator=g).to(dtype)
        a, ar = add_rmsnorm_triton(x, r, w, 1e-6)
        b, br = add_rmsnorm_torch(x, r, w, 1e-6)
        e1 = max(rel_err(a, b), rel_err(ar, br))
        gu = torch.randn(t, 2 * inter, device=DEV, generator=g).to(dtype)
        e2 = rel_err(silu_mul_triton(gu), silu_mul_torch(gu))
        qkv = torch.randn(t, (heads + 2) * d, device=DEV, generator=g).to(dtype)
        pos = torch.randint(0, 100, (t,), device=DEV, generator=g)
        cos, sin = rope_tables(128, d, 10000.0)
        q1 = qkv.clone()
        q2 = qkv.clone()
        rope_triton(q1, pos, cos, sin, heads, d)
        rope_torch(q2, pos, cos, sin, heads, d)
        e3 = rel_err(q1, q2)
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        log(f"triton self-check rel err: add_rmsnorm {e1:.2e} silu_mul {e2:.2e} rope {e3:.2e}")
        if max(e1, e2, e3) < tol and all(map(math.isfinite, (e1, e2, e3))):
            OPS.update(add_rmsnorm=add_rmsnorm_triton, silu_mul=silu_mul_triton,
                       rope=rope_triton, name="triton")
            return f"triton (rel err {max(e1, e2, e3):.1e})"
        return f"torch (triton mismatch {e1:.1e}/{e2:.1e}/{e3:.1e})"
    except Exception as e:
        log("triton self-check failed:", repr(e)[:300])
        return f"torch (triton failed: {type(e).__name__})"


def rope_tables(max_pos, head_dim, theta):
    half = head_dim // 2
    inv = 1.0 / (theta ** (torch.arange(0, half, device=DEV, dtype=torch.float32) / half))
    ang = torch.arange(max_pos, device=DEV, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos().contiguous(), ang.sin().contiguous()


# ---------------------------------------------------------------------------------------------
# Attention (torch SDPA)
# ---------------------------------------------------------------------------------------------

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except Exception:  # pragma: no cover
    SDPBackend = None
    sdpa_kernel = None


def backend_list():
    if not CUDA or SDPBackend is None:
        return [None]
    return [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION]


def backend_name(b):
    if b is None:
        return "default"
    return str(b).split(".")[-1].lower()


def _sdpa(backend, q, k, v, causal, gqa):
    if backend is None or sdpa_kernel is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def decode_attention(backend, q_rows, k_cache, v_cache, heads, kv_heads, head_dim):
    """q_rows: [B, heads*head_dim] (a strided view is fine); caches [B, kv_heads, T, D].
    The heads sharing a KV head are packed as query rows: [B, kv_heads, group, D]."""
    b = q_rows.shape[0]
    group = heads // kv_heads
    q = q_rows.view(b, kv_heads, group, head_dim)
    out = _sdpa(backend, q, k_cache, v_cache, False, False)
    return out.reshape(b, heads * head_dim)


# How prefill attention handles GQA per backend: "gqa" (enable_gqa) or "expand".
PREFILL_GQA_MODE = {}


def prefill_attention(backend, q_rows, k_cache, v_cache, heads, kv_heads, head_dim):
    """q_rows: [N, heads*head_dim] view; caches [1, kv_heads, N, D]; causal, no context."""
    n = q_rows.shape[0]
    q = q_rows.view(n, heads, head_dim).transpose(0, 1).unsqueeze(0)
    mode = PREFILL_GQA_MODE.get(backend_name(backend), "gqa")
    if kv_heads == heads:
        out = _sdpa(backend, q, k_cache, v_cache, True, False)
    elif mode == "gqa":
        out = _sdpa(backend, q, k_cache, v_cache, True, True)
    else:
        g = heads // kv_heads
        out = _sdpa(backend, q, k_cache.repeat_interleave(g, dim=1),
                    v_cache.repeat_interleave(g, dim=1), True, False)
    return out[0].transpose(0, 1).reshape(n, heads * head_dim)


def reference_attention(q, k, v, causal):
    """float64 math attention, q [B, H, S, D], k/v [B, Hkv, T, D]."""
    g = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(g, dim=1)
    v = v.double().repeat_interleave(g, dim=1)
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, tk = s.shape[-2], s.shape[-1]
        m = torch.ones(sq, tk, dtype=torch.bool, device=s.device).tril(tk - sq)
        s = s.masked_fill(~m, float("-inf"))
    return s.softmax(-1) @ v


def check_attention(backends, c):
    """Per backend: does decode (packed GQA) and prefill (GQA or expanded) run and agree with
    a float64 reference? Returns {name: status} and fills PREFILL_GQA_MODE."""
    heads, kvh, d = c["heads"], c["kv_heads"], c["head_dim"]
    out = {}
    g = torch.Generator(device=DEV).manual_seed(2)
    b, t, n = 3, 77, 40
    qr = torch.randn(b, heads * d, device=DEV, generator=g).to(DTYPE)
    k = torch.randn(b, kvh, t, d, device=DEV, generator=g).to(DTYPE)
    v = torch.randn(b, kvh, t, d, device=DEV, generator=g).to(DTYPE)
    ref_dec = reference_attention(qr.view(b, heads, 1, d), k, v, False).reshape(b, heads * d)
    qp = torch.randn(n, heads * d, device=DEV, generator=g).to(DTYPE)
    kp = torch.randn(1, kvh, n, d, device=DEV, generator=g).to(DTYPE)
    vp = torch.randn(1, kvh, n, d, device=DEV, generator=g).to(DTYPE)
    ref_pre = reference_attention(qp.view(n, heads, d).transpose(0, 1)[None], kp, vp, True)
    ref_pre = ref_pre[0].transpose(0, 1).reshape(n, heads * d)
    for be in backends:
        name = backend_name(be)
        status = []
        try:
            e = rel_err(decode_attention(be, qr, k, v, heads, kvh, d), ref_dec)
            status.append(f"decode ok {e:.1e}" if e < 2e-2 else f"decode BAD {e:.1e}")
        except Exception as ex:
            status.append(f"decode unsupported ({type(ex).__name__})")
        for mode in ("gqa", "expand"):
            PREFILL_GQA_MODE[name] = mode
            try:
                e = rel_err(prefill_attention(be, qp, kp, vp, heads, kvh, d), ref_pre)
                if e < 2e-2:
                    status.append(f"prefill ok ({mode}) {e:.1e}")
                    break
                status.append(f"prefill BAD ({mode}) {e:.1e}")
            except Exception as ex:
                status.append(f"prefill {mode} unsupported ({type(ex).__name__})")
        else:
            PREFILL_GQA_MODE[name] = None
        out[name] = "; ".join(status)
        log(f"attention backend {name}: {out[name]}")
    return out


# ---------------------------------------------------------------------------------------------
# KV pool: per-layer dense caches carved out of one buffer (layers alias when it is too small)
# ---------------------------------------------------------------------------------------------


class KvPool:
    def __init__(self, elems):
        self.elems = int(elems)
        self.buf = torch.empty(self.elems, dtype=DTYPE, device=DEV)
        # random, not zeros (zeros run faster than real data); in chunks to bound temporaries
        chunk = 1 << 28
        for i in range(0, self.elems, chunk):
            self.buf[i:i + chunk].normal_()

    def caches(self, layers, b, kvh, t, d):
        """[(k, v)] per layer, each [b, kvh, t, d]; distinct slices while they fit."""
        n = b * kvh * t * d
        slots = min(layers, self.elems // (2 * n))
        if slots < 1:
            raise MemoryError(f"KV pool of {self.elems} elems < one layer ({2 * n})")
        out = []
        for l in range(layers):
            s = l % slots
            k = self.buf[2 * s * n:(2 * s + 1) * n].view(b, kvh, t, d)
            v = self.buf[(2 * s + 1) * n:(2 * s + 2) * n].view(b, kvh, t, d)
            out.append((k, v))
        return out, slots


# ---------------------------------------------------------------------------------------------
# The model with random weights
# ---------------------------------------------------------------------------------------------


def rand_weight(n, k, gen):
    w = torch.empty(n, k, dtype=DTYPE, device=DEV)
    w.normal_(0.0, 1.0 / math.sqrt(k), generator=gen)
    return w


class Model:
    def __init__(self, name, layers_run=None, seed=0):
        c = MODELS[name]
        self.name = name
        self.c = c
        self.layers = c["layers"]
        self.layers_run = layers_run or c["layers"]
        g = torch.Generator(device=DEV).manual_seed(seed)
        h, d = c["hidden"], c["head_dim"]
        self.qkv_n = (c["heads"] + 2 * c["kv_heads"]) * d
        self.w = []
        for _ in range(self.layers_run):
            lw = dict(
                in_norm=(1.0 + 0.1 * torch.randn(h, device=DEV, generator=g)).to(DTYPE),
                qkv=rand_weight(self.qkv_n, h, g),
                qkv_b=(0.1 * torch.randn(self.qkv_n, device=DEV, generator=g)).to(DTYPE)
                if c["qkv_bias"] else None,
                o=rand_weight(h, c["heads"] * d, g),
                post_norm=(1.0 + 0.1 * torch.randn(h, device=DEV, generator=g)).to(DTYPE),
                gate_up=rand_weight(2 * c["inter"], h, g),
                down=rand_weight(h, c["inter"], g),
            )
            self.w.append(lw)
        self.embed = torch.empty(c["vocab"], h, dtype=DTYPE, device=DEV).normal_(generator=g)
        self.final_norm = (1.0 + 0.1 * torch.randn(h, device=DEV, generator=g)).to(DTYPE)
        self.lm_head = rand_weight(c["vocab"], h, g)
        self.cos, self.sin = rope_tables(16384 + 8, d, c["rope_theta"])

    def weight_bytes(self):
        n = 0
        for lw in self.w:
            n += sum(t.numel() for t in lw.values() if t is not None)
        return 2 * n

    # --- one step -------------------------------------------------------------------------
    def step(self, kind, batch, ctx, new_tokens, pool, backend):
        """Build a Step for `batch` decodes after `ctx` tokens, or one `new_tokens` prefill."""
        return Step(self, kind, batch, ctx, new_tokens, pool, backend)


class Step:
    LAYER_STAGES = ["norm", "qkv", "rope", "cache", "attn", "o", "gate_up", "act", "down"]
    HEAD_STAGES = ["embed", "final_norm", "lm_head", "sample"]

    def __init__(self, m, kind, batch, ctx, new_tokens, pool, backend):
        c = m.c
        self.m, self.c, self.kind, self.backend = m, c, kind, backend
        self.heads, self.kvh, self.d = c["heads"], c["kv_heads"], c["head_dim"]
        g = torch.Generator(device=DEV).manual_seed(3)
        if kind == "decode":
            self.t = batch
            keys = ctx + 1
            self.caches, self.slots = pool.caches(m.layers_run, batch, self.kvh, keys, self.d)
            self.pos = torch.full((batch,), ctx, dtype=torch.long, device=DEV)
            self.rows = None  # every row samples
        else:
            self.t = new_tokens
            self.caches, self.slots = pool.caches(m.layers_run, 1, self.kvh, new_tokens, self.d)
            self.pos = torch.arange(new_tokens, dtype=torch.long, device=DEV)
            self.rows = torch.tensor([new_tokens - 1], dtype=torch.long, device=DEV)
        self.ctx = ctx
        self.ids = torch.randint(0, c["vocab"], (self.t,), device=DEV, generator=g)
        self.st = {}

    # layer stages: each reads and writes self.st
    def s_norm_in(self, l):
        st = self.st
        st["h"], st["res"] = OPS["add_rmsnorm"](st["x"], st["res"], self.m.w[l]["in_norm"],
                                                self.c["eps"])

    def s_qkv(self, l):
        lw = self.m.w[l]
        self.st["qkv"] = F.linear(self.st["h"], lw["qkv"], lw["qkv_b"])

    def s_rope(self, l):
        OPS["rope"](self.st["qkv"], self.pos, self.m.cos, self.m.sin, self.heads + self.kvh,
                    self.d)

    def s_cache(self, l):
        qkv = self.st["qkv"]
        hd, kd = self.heads * self.d, self.kvh * self.d
        k_new = qkv[:, hd:hd + kd].view(self.t, self.kvh, self.d)
        v_new = qkv[:, hd + kd:hd + 2 * kd].view(self.t, self.kvh, self.d)
        kc, vc = self.caches[l]
        if self.kind == "decode":
            kc[:, :, self.ctx, :].copy_(k_new)
            vc[:, :, self.ctx, :].copy_(v_new)
        else:
            kc[0].copy_(k_new.transpose(0, 1))
            vc[0].copy_(v_new.transpose(0, 1))

    def s_attn(self, l):
        q_rows = self.st["qkv"][:, :self.heads * self.d]
        kc, vc = self.caches[l]
        f = decode_attention if self.kind == "decode" else prefill_attention
        self.st["attn"] = f(self.backend, q_rows, kc, vc, self.heads, self.kvh, self.d)

    def s_o(self, l):
        self.st["o"] = F.linear(self.st["attn"], self.m.w[l]["o"])

    def s_norm_post(self, l):
        st = self.st
        st["h2"], st["res"] = OPS["add_rmsnorm"](st["o"], st["res"], self.m.w[l]["post_norm"],
                                                 self.c["eps"])

    def s_gate_up(self, l):
        self.st["gu"] = F.linear(self.st["h2"], self.m.w[l]["gate_up"])

    def s_act(self, l):
        self.st["act"] = OPS["silu_mul"](self.st["gu"])

    def s_down(self, l):
        self.st["x"] = F.linear(self.st["act"], self.m.w[l]["down"])

    # head stages
    def s_embed(self):
        self.st["x"] = F.embedding(self.ids, self.m.embed)
        self.st["res"] = torch.zeros_like(self.st["x"])

    def s_final_norm(self):
        st = self.st
        hn, _ = OPS["add_rmsnorm"](st["x"], st["res"], self.m.final_norm, self.c["eps"])
        st["hsel"] = hn if self.rows is None else hn.index_select(0, self.rows)

    def s_lm_head(self):
        self.st["logits"] = F.linear(self.st["hsel"], self.m.lm_head)

    def s_sample(self):
        self.st["next"] = torch.argmax(self.st["logits"].float(), dim=-1)

    def layer_fns(self, stage):
        return {
            "norm": [self.s_norm_in, self.s_norm_post],
            "qkv": [self.s_qkv], "rope": [self.s_rope], "cache": [self.s_cache],
            "attn": [self.s_attn], "o": [self.s_o], "gate_up": [self.s_gate_up],
            "act": [self.s_act], "down": [self.s_down],
        }[stage]

    def layers(self):
        for l in range(self.m.layers_run):
            self.s_norm_in(l)
            self.s_qkv(l)
            self.s_rope(l)
            self.s_cache(l)
            self.s_attn(l)
            self.s_o(l)
            self.s_norm_post(l)
            self.s_gate_up(l)
            self.s_act(l)
            self.s_down(l)

    def head(self):
        self.s_embed()
        self.s_final_norm()
        self.s_lm_head()
        self.s_sample()

    def full(self):
        self.s_embed()
        self.layers()
        self.s_final_norm()
        self.s_lm_head()
        self.s_sample()
        return self.st["next"]

    def stage_runner(self, stage):
        if stage in self.HEAD_STAGES:
            fn = getattr(self, "s_" + stage)
            return fn
        fns = self.layer_fns(stage)

        def run():
            for l in range(self.m.layers_run):
                for f in fns:
                    f(l)
        return run

    def layers_only(self):
        # the residual stream restarts from the embedding each call (layers alone, no head)
        self.layers()


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------


def nvidia_smi():
    q = ("name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,"
         "power.limit,temperature.gpu,memory.used,memory.total")
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=15)
        return (r.stdout.strip() or r.stderr.strip()).replace("\n", " | ")
    except Exception as e:
        return f"unavailable ({type(e).__name__})"


def gpu_clock_power():
    """SM clock (MHz) and board power (W) right now, through NVML; blanks if unavailable."""
    if not CUDA:
        return "", ""
    out = []
    for f in ("clock_rate", "power_draw"):
        try:
            v = getattr(torch.cuda, f)()
            out.append(v / 1000.0 if f == "power_draw" else v)
        except Exception:
            out.append("")
    return out[0], out[1]


def section_env(env, args):
    env.row(key="script", value="bench/device/step_timings.py")
    env.row(key="args", value=" ".join(sys.argv[1:]))
    env.row(key="torch", value=torch.__version__)
    env.row(key="torch_cuda", value=str(torch.version.cuda))
    if CUDA:
        p = torch.cuda.get_device_properties(0)
        env.row(key="gpu_name", value=p.name)
        env.row(key="sm_count", value=p.multi_processor_count)
        env.row(key="gpu_memory_bytes", value=p.total_memory)
        env.row(key="cudnn", value=str(torch.backends.cudnn.version()))
        env.row(key="nvidia_smi_start", value=nvidia_smi())
    if HAVE_TRITON:
        env.row(key="triton", value=triton.__version__)
    env.row(key="python", value=sys.version.split()[0])


def section_ceilings(env):
    n = 8192 if CUDA else 256
    g = torch.Generator(device=DEV).manual_seed(4)
    a = torch.randn(n, n, device=DEV, generator=g).to(DTYPE)
    b = torch.randn(n, n, device=DEV, generator=g).to(DTYPE)
    ms, mn, _, mode = time_fn(lambda: a @ b, graph=False, reps=10, warmup=3, target_ms=1)
    tf = 2 * n ** 3 / (ms * 1e-3) / 1e12
    env.row(key=f"matmul_{n}_bf16_tflops", value=f"{tf:.1f}")
    log(f"ceiling: {n}^3 bf16 matmul {ms:.3f} ms = {tf:.0f} TFLOP/s")
    del a, b
    numel = (1 << 30) if CUDA else (1 << 20)  # 2 GiB of bf16
    src = torch.empty(numel, dtype=DTYPE, device=DEV).normal_()
    dst = torch.empty_like(src)
    ms, mn, _, _ = time_fn(lambda: dst.copy_(src), graph=False, reps=10, warmup=2, target_ms=1)
    gbps = 2 * 2 * numel / (ms * 1e-3) / 1e9
    env.row(key="d2d_copy_gbps_read_plus_write", value=f"{gbps:.0f}")
    log(f"ceiling: device copy {gbps:.0f} GB/s (read+write)")
    del src, dst
    if CUDA:
        env.row(key="nvidia_smi_after_matmul", value=nvidia_smi())
        torch.cuda.empty_cache()


def section_gemm(out, models, ms_list, budget_frac_end):
    """F.linear at each M for each linear shape; weights cycled over copies >= 256 MB."""
    for name in models:
        c = MODELS[name]
        for op, n, k in linear_shapes(c):
            wbytes = 2 * n * k
            copies = max(1, min(16, math.ceil((256 << 20) / wbytes))) if CUDA else 2
            g = torch.Generator(device=DEV).manual_seed(5)
            ws = [rand_weight(n, k, g) for _ in range(copies)]
            for m_rows in ms_list:
                if time_left() < budget_frac_end:
                    log("gemm: out of time, stopping")
                    return
                x = torch.randn(m_rows, k, device=DEV, generator=g).to(DTYPE)
                it = [0]

                def fn():
                    i = it[0]
                    it[0] = (i + 1) % copies
                    return F.linear(x, ws[i])

                # the graph replays the calls in capture order: cycle through every copy
                ms, mn, inner, mode = time_fn(fn, inner_multiple=copies, max_inner=256)
                flops = 2.0 * m_rows * n * k
                byts = 2.0 * (n * k + m_rows * k + m_rows * n)
                out.row(model=name, op=op, M=m_rows, N=n, K=k, copies=copies, inner=inner,
                        mode=mode, us_median=ms * 1e3, us_min=mn * 1e3,
                        tflops=flops / (ms * 1e-3) / 1e12, gbps=byts / (ms * 1e-3) / 1e9)
                del x
            log(f"gemm {name} {op} [{n}x{k}] done")
            del ws
            if CUDA:
                torch.cuda.empty_cache()


def section_attention(out, c, model_name, backends, decode_grid, prefill_list, pool, best):
    heads, kvh, d = c["heads"], c["kv_heads"], c["head_dim"]
    layers = c["layers"]
    for be in backends:
        name = backend_name(be)
        for b, ctx in decode_grid:
            if time_left() < 30:
                return
            keys = ctx + 1
            per_layer = 2 * b * kvh * keys * d * 2
            copies = max(1, min(layers, math.ceil((512 << 20) / per_layer))) if CUDA else 1
            try:
                caches, slots = pool.caches(copies, b, kvh, keys, d)
                q = torch.randn(b, heads * d, device=DEV).to(DTYPE)
                it = [0]

                def fn():
                    i = it[0]
                    it[0] = (i + 1) % slots
                    kc, vc = caches[i]
                    return decode_attention(be, q, kc, vc, heads, kvh, d)

                ms, mn, inner, mode = time_fn(fn, inner_multiple=slots, max_inner=256)
                gbps = per_layer / (ms * 1e-3) / 1e9
                out.row(model=model_name, backend=name, kind="decode", batch=b, keys=keys,
                        q_tokens=b, slots=slots, mode=mode, us_per_layer=ms * 1e3,
                        kv_gbps=gbps, tflops=4.0 * b * heads * d * keys / (ms * 1e-3) / 1e12)
                key = ("decode", b, ctx)
                if key not in best or ms < best[key][1]:
                    best[key] = (be, ms)
            except Exception as e:
                out.row(model=model_name, backend=name, kind="decode", batch=b, keys=keys,
                        mode=f"error {type(e).__name__}")
        log(f"attention {model_name} {name} decode done")
        if PREFILL_GQA_MODE.get(name) is None:
            continue
        for n in prefill_list:
            if time_left() < 30:
                return
            try:
                caches, slots = pool.caches(1, 1, kvh, n, d)
                kc, vc = caches[0]
                q = torch.randn(n, heads * d, device=DEV).to(DTYPE)
                ms, mn, inner, mode = time_fn(
                    lambda: prefill_attention(be, q, kc, vc, heads, kvh, d), max_inner=64)
                flops = 4.0 * heads * d * n * (n + 1) / 2
                out.row(model=model_name, backend=name + "/" + PREFILL_GQA_MODE[name],
                        kind="prefill", batch=1, keys=n, q_tokens=n, slots=1, mode=mode,
                        us_per_layer=ms * 1e3,
                        kv_gbps=2 * kvh * n * d * 2 / (ms * 1e-3) / 1e9,
                        tflops=flops / (ms * 1e-3) / 1e12)
                key = ("prefill", 1, n)
                if key not in best or ms < best[key][1]:
                    best[key] = (be, ms)
            except Exception as e:
                out.row(model=model_name, backend=name, kind="prefill", batch=1, keys=n,
                        mode=f"error {type(e).__name__}")
        log(f"attention {model_name} {name} prefill done")


def section_attn_variants(out, c, model_name, pool,
                          shapes=((64, 2048), (256, 2048), (256, 8192))):
    """Why decode attention inside a step can run slower than alone: the same shape with
    (a) a contiguous q and one KV slice, (b) q as the strided view of a qkv row the step
    passes, (c) a contiguous q cycling over the per-layer KV slices the step uses."""
    heads, kvh, d = c["heads"], c["kv_heads"], c["head_dim"]
    qkv_n = (heads + 2 * kvh) * d
    for be in backend_list():
        name = backend_name(be)
        for b, ctx in shapes:
            if time_left() < 40:
                return
            keys = ctx + 1
            per_layer = 2 * b * kvh * keys * d * 2
            try:
                one, _ = pool.caches(1, b, kvh, keys, d)
                many, slots = pool.caches(c["layers"], b, kvh, keys, d)
                qc = torch.randn(b, heads * d, device=DEV).to(DTYPE)
                qkv = torch.randn(b, qkv_n, device=DEV).to(DTYPE)
                qs = qkv[:, :heads * d]
                it = [0]

                def cyc():
                    i = it[0]
                    it[0] = (i + 1) % len(many)
                    kc, vc = many[i]
                    return decode_attention(be, qc, kc, vc, heads, kvh, d)

                variants = [
                    ("contig-q/1-slice",
                     lambda: decode_attention(be, qc, one[0][0], one[0][1], heads, kvh, d), 1),
                    ("strided-q/1-slice",
                     lambda: decode_attention(be, qs, one[0][0], one[0][1], heads, kvh, d), 1),
                    (f"contig-q/{slots}-slots-x{len(many)}", cyc, len(many)),
                ]
                for tag, fn, mult in variants:
                    ms, mn, inner, mode = time_fn(fn, inner_multiple=mult, max_inner=256,
                                                  target_ms=3.0)
                    out.row(model=model_name, backend=f"{name}+{tag}", kind="decode-variant",
                            batch=b, keys=keys, q_tokens=b, slots=slots, mode=mode,
                            us_per_layer=ms * 1e3, kv_gbps=per_layer / (ms * 1e-3) / 1e9,
                            tflops=4.0 * b * heads * d * keys / (ms * 1e-3) / 1e12)
            except Exception as e:
                out.row(model=model_name, backend=name, kind="decode-variant", batch=b,
                        keys=keys, mode=f"error {type(e).__name__}")
    log(f"attention variants {model_name} done")


STEP_FIELDS = (["model", "kind", "batch", "ctx", "new_tokens", "layers", "layers_run", "scale",
                "attn_backend", "elementwise", "mode", "step_ms", "step_ms_min", "full_ms",
                "layers_ms", "head_ms", "eager_ms", "sm_mhz", "power_w"]
               + ["s_" + s for s in Step.LAYER_STAGES + Step.HEAD_STAGES])


def section_steps(out, model, decode_grid, prefill_list, pool, best, breakdown, reserve_s):
    c = model.c
    scale = model.layers / model.layers_run
    cases = [("decode", b, ctx, b) for b, ctx in decode_grid]
    cases += [("prefill", 1, 0, n) for n in prefill_list]
    for kind, b, ctx, n in cases:
        if time_left() < reserve_s:
            log(f"steps {model.name}: out of time before {kind} {b} {ctx} {n}")
            return
        key = (kind, b, ctx) if kind == "decode" else (kind, 1, n)
        be = best.get(key, (backend_list()[0], None))[0]
        try:
            s = model.step(kind, b, ctx, n, pool, be)
            s.full()  # populate every stage's inputs
            sync()
            full_ms, full_min, _, mode = time_fn(s.full, reps=7, target_ms=1.0, max_inner=32)
            sm_mhz, power_w = gpu_clock_power()
            row = dict(model=model.name, kind=kind, batch=b, ctx=ctx,
                       new_tokens=n, layers=model.layers, layers_run=model.layers_run,
                       scale=scale, attn_backend=backend_name(be) + (
                           "/" + str(PREFILL_GQA_MODE.get(backend_name(be)))
                           if kind == "prefill" else "/packed-gqa"),
                       elementwise=OPS["name"], mode=mode, full_ms=full_ms, sm_mhz=sm_mhz,
                       power_w=power_w)
            if scale != 1.0:
                lay_ms, _, _, _ = time_fn(s.layers_only, reps=5, target_ms=1.0, max_inner=32)
                head_ms, _, _, _ = time_fn(s.head, reps=5, target_ms=1.0, max_inner=64)
                row.update(layers_ms=lay_ms, head_ms=head_ms,
                           step_ms=lay_ms * scale + head_ms, step_ms_min="")
            else:
                row.update(step_ms=full_ms, step_ms_min=full_min)
            s.full()
            sync()
            if scale == 1.0:
                eager = statistics.median(_elapsed_ms(s.full) for _ in range(3))
            else:
                eager = (statistics.median(_elapsed_ms(s.layers_only) for _ in range(3)) * scale
                         + statistics.median(_elapsed_ms(s.head) for _ in range(3)))
            row["eager_ms"] = eager
            if breakdown:
                for stage in Step.LAYER_STAGES + Step.HEAD_STAGES:
                    st_ms, _, _, _ = time_fn(s.stage_runner(stage), reps=5, target_ms=0.5,
                                             max_inner=64)
                    mult = scale if stage in Step.LAYER_STAGES else 1.0
                    row["s_" + stage] = st_ms * mult
            out.row(**row)
            log(f"step {model.name} {kind} B={b} ctx={ctx} n={n}: {row['step_ms']:.3f} ms "
                f"({mode}, {row['attn_backend']}, eager {row['eager_ms']:.3f} ms)")
            del s
        except Exception as e:
            log(f"step {model.name} {kind} B={b} ctx={ctx} n={n} failed: {e!r}"[:400])
            traceback.print_exc()
            out.row(model=model.name, kind=kind, batch=b, ctx=ctx, new_tokens=n,
                    mode=f"error {type(e).__name__}")
        if CUDA:
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------


def main():
    global DEV, CUDA, DEADLINE, DTYPE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--dry-run", action="store_true", help="tiny model on the CPU")
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop starting work after")
    ap.add_argument("--models", default="llama-3.1-8b,qwen2.5-7b,llama-3.1-70b")
    ap.add_argument("--gemm-models", default="llama-3.1-8b,llama-3.1-70b,qwen2.5-7b")
    ap.add_argument("--breakdown", default="llama-3.1-8b,qwen2.5-7b,llama-3.1-70b",
                    help="models whose steps are also timed stage by stage")
    ap.add_argument("--layers-70b", type=int, default=4,
                    help="distinct layers run for llama-3.1-70b (time scaled to 80)")
    ap.add_argument("--pool-gib", type=float, default=48.0, help="KV pool size")
    ap.add_argument("--skip", default="", help="comma list of sections to skip")
    args = ap.parse_args()

    DEADLINE = T0 + args.budget_s
    if args.dry_run:
        DEV, CUDA = torch.device("cpu"), False
        models = ["tiny"]
        gemm_models = ["tiny"]
        breakdown = {"tiny"}
        decode_grid = [(b, ctx) for b in (1, 3) for ctx in (16, 40)]
        prefill_list = [8, 24]
        ms_list = [1, 4, 16]
        pool_elems = 1 << 22
    else:
        if not torch.cuda.is_available():
            sys.exit("no CUDA device (use --dry-run on the CPU)")
        DEV, CUDA = torch.device("cuda"), True
        torch.cuda.set_device(0)
        models = [m for m in args.models.split(",") if m]
        gemm_models = [m for m in args.gemm_models.split(",") if m]
        breakdown = set(args.breakdown.split(","))
        decode_grid = [(b, ctx) for b in (1, 8, 32, 64, 128, 256) for ctx in (512, 2048, 8192)]
        prefill_list = [128, 512, 2048, 8192]
        ms_list = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
        pool_elems = int(args.pool_gib * (1 << 30) / 2)
    skip = set(args.skip.split(","))
    os.makedirs(args.out, exist_ok=True)
    env = CsvOut(os.path.join(args.out, "env.csv"), ["key", "value"])
    section_env(env, args)
    fused = check_fused_kernels(DTYPE)
    env.row(key="elementwise_kernels", value=fused)

    if "ceilings" not in skip:
        section_ceilings(env)

    log("allocating KV pool", pool_elems * 2 / 2 ** 30, "GiB")
    pool = KvPool(pool_elems)
    attn_out = CsvOut(os.path.join(args.out, "attn.csv"),
                      ["model", "backend", "kind", "batch", "keys", "q_tokens", "slots", "mode",
                       "us_per_layer", "kv_gbps", "tflops"])
    steps_out = CsvOut(os.path.join(args.out, "steps.csv"), STEP_FIELDS)
    gemm_out = CsvOut(os.path.join(args.out, "gemm.csv"),
                      ["model", "op", "M", "N", "K", "copies", "inner", "mode", "us_median",
                       "us_min", "tflops", "gbps"])

    # Priority order: the first model's attention + steps, its GEMMs, then the rest.
    first, rest = models[0], models[1:]
    order = [("attn", first), ("steps", first), ("gemm", gemm_models[0])]
    if not args.dry_run:
        order.append(("variants", first))
    for m in rest:
        order += [("attn", m), ("steps", m)]
    for m in gemm_models[1:]:
        order.append(("gemm", m))
    checked = {}
    for sec, name in order:
        if sec in skip:
            continue
        if time_left() < 20:
            log(f"budget spent; skipping {sec} {name}")
            env.row(key=f"skipped_{sec}_{name}", value="budget")
            continue
        log(f"== {sec} {name} ==")
        try:
            c = MODELS[name]
            if sec == "gemm":
                section_gemm(gemm_out, [name], ms_list, 15)
                continue
            if sec == "variants":
                section_attn_variants(attn_out, c, name, pool)
                continue
            att_key = (c["heads"], c["kv_heads"], c["head_dim"])
            if att_key not in checked:
                checked[att_key] = check_attention(backend_list(), c)
                for k2, v2 in checked[att_key].items():
                    env.row(key=f"attn_check_{name}_{k2}", value=v2)
            if sec == "attn":
                best = {}
                section_attention(attn_out, c, name, backend_list(), decode_grid,
                                  prefill_list, pool, best)
                BEST[att_key] = best
                for key, (be, ms) in sorted(best.items(), key=str):
                    env.row(key=f"best_attn_{name}_{key[0]}_{key[1]}_{key[2]}",
                            value=f"{backend_name(be)} {ms * 1e3:.1f} us")
            else:
                best = BEST.get(att_key, {})
                layers_run = args.layers_70b if name == "llama-3.1-70b" else None
                model = Model(name, layers_run=layers_run)
                env.row(key=f"weights_bytes_{name}", value=model.weight_bytes())
                section_steps(steps_out, model, decode_grid, prefill_list, pool, best,
                              name in breakdown, reserve_s=15)
                del model
                if CUDA:
                    torch.cuda.empty_cache()
        except Exception as e:
            log(f"section {sec} {name} failed: {e!r}"[:400])
            traceback.print_exc()
            env.row(key=f"error_{sec}_{name}", value=repr(e)[:300])
    if CUDA:
        env.row(key="nvidia_smi_end", value=nvidia_smi())
    if GRAPH_FAILURES:
        env.row(key="graph_failures", value=len(GRAPH_FAILURES))
        env.row(key="graph_failure_first", value=GRAPH_FAILURES[0])
    env.row(key="elapsed_s", value=f"{time.time() - T0:.1f}")
    log("done in", f"{time.time() - T0:.1f}s")
    summary(args.out)


def summary(out_dir):
    """A short table at the end of the output (the device tool returns the tail)."""
    def rows(name):
        try:
            with open(os.path.join(out_dir, name)) as f:
                return list(csv.DictReader(f))
        except OSError:
            return []
    print("\n== steps (ms): model kind B ctx n | graph step | eager | attn stage ==")
    for r in rows("steps.csv"):
        print(f"{r['model']:14s} {r['kind']:7s} {r['batch']:>4s} {r['ctx']:>5s} "
              f"{r['new_tokens']:>5s} | {r['step_ms']:>9s} | {r['eager_ms']:>9s} | "
              f"{r.get('s_attn', '')}  {r['mode']} {r['attn_backend']}")
    print("\n== gemm TFLOP/s by M (first model) ==")
    g = rows("gemm.csv")
    if g:
        first = g[0]["model"]
        ops = []
        for r in g:
            if r["model"] == first and r["op"] not in ops:
                ops.append(r["op"])
        for op in ops:
            cells = [f"{r['M']}:{float(r['tflops']):.0f}/{float(r['gbps']):.0f}" for r in g
                     if r["model"] == first and r["op"] == op and r["tflops"]]
            print(f"{op:8s} (TFLOP/s / GB/s) " + " ".join(cells))


BEST = {}

if __name__ == "__main__":
    main()
