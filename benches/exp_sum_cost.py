#!/usr/bin/env python3
"""Design measurement for issue 31 (docs/VOCAB_PARALLEL.md §6, step 3): what an
order-free row sum costs on the GPU against the float sum the kernels run today,
before either is written in the kernels. Triton stand-ins, one program per row,
each lane folding every BLOCK-th value of the row:

- `float`:  the kernels' sum today, `max` and `Σ 2^((y − max)·log2 e)` online
            (hardware `ex2`), in `f32`.
- `exact`:  REFERENCE §2.6's term in `f32` (`specdec_core::exp_sum::term`: the
            split of `y`, `k` from the halves rounded, a degree-7 polynomial,
            `m` an integer), added as integers into groups of 32 binades by
            `k` (the lane's top group and the two below it, `m << (k mod 32)`).
- `exact-ex2`: the same groups, the term from the hardware `ex2` of
            `u − round(u)` (a GPU-only rule: the CPU cannot reproduce `ex2`).
- `quad`, `quad-ex2`: each aligned quad of ids first summed in floats (its
            maximum and `Σ ex2`), then the quad's `ln` as one term of the
            exact groups (by the `f32` rule, or by `ex2`): a quarter of the
            terms, order-free across any split on quad boundaries (shard
            offsets are multiples of 4), on the GPU alone; `tile16`,
            `tile16-ex2` the same with tiles of 16 ids.

Rows: B = 256, K = 7 (2,048 rows) of V = 151,936, f32 and bf16, the shape of the
issue's bench. Each case's read bandwidth is printed as a fraction of the copy
bandwidth (`torch.clone`, read + write) measured in the same run. The `exact`
kernel's terms are also checked against numpy's `f32` arithmetic of the rule
(every `+ − ×` rounded once: the kernel runs with `enable_fp_fusion=False`).

    python3 benches/exp_sum_cost.py        # on a CUDA machine with torch and triton
"""

import numpy as np
import torch
import triton
import triton.language as tl

Y_MAX = 536870912.0
LOG2E_HI = np.frombuffer(np.uint32(0x3FB8A000).tobytes(), np.float32)[0]
LOG2E_LO = np.frombuffer(np.uint32(0x39A3B296).tobytes(), np.float32)[0]
COEFFS = []
_t = 1.0
for _n in range(7):
    _t = _t * np.log(2.0) / (_n + 1)
    COEFFS.append(float(np.float32(_t)))


@triton.jit
def _round_half_away(x):
    half = tl.where(x < 0, -0.5, 0.5)
    return (x + half).to(tl.int32)


@triton.jit
def _term(y, L2H: tl.constexpr, L2L: tl.constexpr, C0: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr,
          C3: tl.constexpr, C4: tl.constexpr, C5: tl.constexpr, C6: tl.constexpr):
    y = tl.minimum(tl.maximum(y, -536870912.0), 536870912.0)
    c = y * 4097.0
    yh = c - (c - y)
    yl = y - yh
    a = yh * L2H
    b = yl * L2H + y * L2L
    ka = _round_half_away(a)
    kb = _round_half_away(b)
    r = (a - ka.to(tl.float32)) + (b - kb.to(tl.float32))
    k = ka + kb
    up = r > 0.5
    down = r < -0.5
    r = tl.where(up, r - 1.0, tl.where(down, r + 1.0, r))
    k = tl.where(up, k + 1, tl.where(down, k - 1, k))
    p = C6
    p = p * r + C5
    p = p * r + C4
    p = p * r + C3
    p = p * r + C2
    p = p * r + C1
    p = p * r + C0
    p = p * r + 1.0
    m = (p * 16777216.0).to(tl.int32)
    return k, m


@triton.jit
def term_kernel(Y, K, M, N, L2H: tl.constexpr, L2L: tl.constexpr, C0: tl.constexpr, C1: tl.constexpr,
                C2: tl.constexpr, C3: tl.constexpr, C4: tl.constexpr, C5: tl.constexpr, C6: tl.constexpr,
                BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    y = tl.load(Y + offs, mask=offs < N, other=0.0)
    k, m = _term(y, L2H, L2L, C0, C1, C2, C3, C4, C5, C6)
    tl.store(K + offs, k, mask=offs < N)
    tl.store(M + offs, m, mask=offs < N)


@triton.jit
def float_kernel(X, OUT, V, stride, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        y = tl.load(X + row * stride + offs, mask=offs < V, other=float("-inf")).to(tl.float32) * scale
        new = tl.maximum(mx, y)
        s = s * tl.math.exp2((mx - new) * 1.4426950408889634) + tl.math.exp2((y - new) * 1.4426950408889634)
        s = tl.where(new == float("-inf"), 0.0, s)
        mx = new
    top = tl.max(mx, 0)
    total = tl.sum(s * tl.math.exp2((mx - top) * 1.4426950408889634), 0)
    tl.store(OUT + row, top + tl.log(total))


@triton.jit
def exact_kernel(X, OUT, V, stride, scale, HW: tl.constexpr, L2H: tl.constexpr, L2L: tl.constexpr,
                 C0: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr, C3: tl.constexpr, C4: tl.constexpr,
                 C5: tl.constexpr, C6: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g_top = tl.full([BLOCK], -(1 << 30), tl.int32)
    a0 = tl.zeros([BLOCK], tl.int64)
    a1 = tl.zeros([BLOCK], tl.int64)
    a2 = tl.zeros([BLOCK], tl.int64)
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        y = tl.load(X + row * stride + offs, mask=offs < V, other=float("-inf")).to(tl.float32) * scale
        live = y > float("-inf")
        mx = tl.maximum(mx, y)
        if HW:
            u = y * 1.4426950408889634
            kf = (u + 12582912.0) - 12582912.0
            k = kf.to(tl.int32)
            m = (tl.math.exp2(u - kf) * 8388608.0).to(tl.int32)
        else:
            k, m = _term(y, L2H, L2L, C0, C1, C2, C3, C4, C5, C6)
        g = tl.where(live, k >> 5, -(1 << 30))
        new = tl.maximum(g_top, g)
        d = new - g_top
        a2 = tl.where(d == 0, a2, tl.where(d == 1, a1, tl.where(d == 2, a0, 0)))
        a1 = tl.where(d == 0, a1, tl.where(d == 1, a0, 0))
        a0 = tl.where(d == 0, a0, 0)
        g_top = new
        j = g_top - g
        x = tl.where(live, m.to(tl.int64) << (k & 31).to(tl.int64), 0)
        a0 += tl.where(j == 0, x, 0)
        a1 += tl.where(j == 1, x, 0)
        a2 += tl.where(j == 2, x, 0)
    # Not the rule's combine (the lanes' groups differ): enough to keep every add live.
    total = tl.sum(a0.to(tl.float32) + a1.to(tl.float32) * 2.3283064e-10 + a2.to(tl.float32) * 5.421011e-20, 0)
    tl.store(OUT + row, tl.max(mx, 0) + tl.log(total) + tl.max(g_top, 0).to(tl.float32))


@triton.jit
def quad_kernel(X, OUT, V, stride, scale, HW: tl.constexpr, L2H: tl.constexpr, L2L: tl.constexpr,
                C0: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr, C3: tl.constexpr, C4: tl.constexpr,
                C5: tl.constexpr, C6: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0)
    Q: tl.constexpr = BLOCK // TILE
    g_top = tl.full([Q], -(1 << 30), tl.int32)
    a0 = tl.zeros([Q], tl.int64)
    a1 = tl.zeros([Q], tl.int64)
    a2 = tl.zeros([Q], tl.int64)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        y = tl.load(X + row * stride + offs, mask=offs < V, other=float("-inf")).to(tl.float32) * scale
        y4 = tl.reshape(y, [Q, TILE])
        top = tl.max(y4, 1)
        live = top > float("-inf")
        safe = tl.where(live, top, 0.0)
        quad = tl.sum(tl.math.exp2((y4 - safe[:, None]) * 1.4426950408889634), 1)
        if HW:
            u = safe * 1.4426950408889634 + tl.math.log2(quad)
            kf = (u + 12582912.0) - 12582912.0
            k = kf.to(tl.int32)
            m = (tl.math.exp2(u - kf) * 8388608.0).to(tl.int32)
        else:
            k, m = _term(safe + tl.log(quad), L2H, L2L, C0, C1, C2, C3, C4, C5, C6)
        g = tl.where(live, k >> 5, -(1 << 30))
        new = tl.maximum(g_top, g)
        d = new - g_top
        a2 = tl.where(d == 0, a2, tl.where(d == 1, a1, tl.where(d == 2, a0, 0)))
        a1 = tl.where(d == 0, a1, tl.where(d == 1, a0, 0))
        a0 = tl.where(d == 0, a0, 0)
        g_top = new
        j = g_top - g
        x = tl.where(live, m.to(tl.int64) << (k & 31).to(tl.int64), 0)
        a0 += tl.where(j == 0, x, 0)
        a1 += tl.where(j == 1, x, 0)
        a2 += tl.where(j == 2, x, 0)
    total = tl.sum(a0.to(tl.float32) + a1.to(tl.float32) * 2.3283064e-10 + a2.to(tl.float32) * 5.421011e-20, 0)
    tl.store(OUT + row, tl.log(total) + tl.max(g_top, 0).to(tl.float32))


def numpy_terms(y):
    """The rule of `specdec_core::exp_sum::term` in numpy f32 (each op rounded once)."""
    f = np.float32
    y = np.clip(y.astype(f), f(-Y_MAX), f(Y_MAX))
    c = y * f(4097.0)
    yh = c - (c - y)
    yl = y - yh
    a = yh * LOG2E_HI
    b = yl * LOG2E_HI + y * LOG2E_LO

    def rha(x):
        return (x + np.where(x < 0, f(-0.5), f(0.5)).astype(f)).astype(np.int64).astype(np.int32)

    ka, kb = rha(a), rha(b)
    r = (a - ka.astype(f)) + (b - kb.astype(f))
    k = ka + kb
    up, down = r > f(0.5), r < f(-0.5)
    r = np.where(up, r - f(1.0), np.where(down, r + f(1.0), r)).astype(f)
    k = np.where(up, k + 1, np.where(down, k - 1, k))
    p = f(COEFFS[6])
    for c_n in reversed(COEFFS[:6]):
        p = p * r + f(c_n)
    p = p * r + f(1.0)
    return k, (p * f(16777216.0)).astype(np.int64)


def check_terms():
    g = torch.Generator().manual_seed(1)
    y = torch.cat([(torch.rand(1 << 20, generator=g) - 0.5) * 400, (torch.rand(1 << 16, generator=g) - 0.5) * 2e8,
                   torch.tensor([0.0, -0.0, 0.5, -0.5, 1e9, -1e9, 5.4e8, -5.4e8])]).float()
    n = y.numel()
    yd = y.cuda()
    k = torch.empty(n, dtype=torch.int32, device="cuda")
    m = torch.empty(n, dtype=torch.int32, device="cuda")
    term_kernel[(triton.cdiv(n, 1024),)](yd, k, m, n, LOG2E_HI.item(), LOG2E_LO.item(), *COEFFS, BLOCK=1024,
                                         enable_fp_fusion=False)
    want_k, want_m = numpy_terms(y.numpy())
    bad = (k.cpu().numpy() != want_k) | (m.cpu().numpy().astype(np.int64) != want_m)
    print(f"terms: {n} values, {int(bad.sum())} differ from numpy's f32 rule")


def time_ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    return best


def main():
    print(torch.cuda.get_device_name(), "triton", triton.__version__)
    check_terms()
    rows, vocab = 2048, 151936
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(rows, vocab, device="cuda") * 3).to(dtype)
        out = torch.empty(rows, device="cuda")
        nbytes = x.numel() * x.element_size()
        copy = time_ms(lambda: x.clone())
        copy_bw = 2 * nbytes / copy / 1e6
        print(f"\n{dtype}, {rows} rows x {vocab}: copy {copy:.3f} ms ({copy_bw:.0f} GB/s read+write)")
        cases = {
            "float": lambda b: float_kernel[(rows,)](x, out, vocab, vocab, 1.0 / 0.7, BLOCK=b, num_warps=b // 128),
            "exact": lambda b: exact_kernel[(rows,)](x, out, vocab, vocab, 1.0 / 0.7, False, LOG2E_HI.item(),
                                                     LOG2E_LO.item(), *COEFFS, BLOCK=b, num_warps=b // 128,
                                                     enable_fp_fusion=False),
            "exact-ex2": lambda b: exact_kernel[(rows,)](x, out, vocab, vocab, 1.0 / 0.7, True, LOG2E_HI.item(),
                                                         LOG2E_LO.item(), *COEFFS, BLOCK=b, num_warps=b // 128,
                                                         enable_fp_fusion=False),
        }
        for tile in (4, 16):
            for hw in (True, False):
                name = ("quad" if tile == 4 else f"tile{tile}") + ("-ex2" if hw else "")
                cases[name] = lambda b, hw=hw, tile=tile: quad_kernel[(rows,)](
                    x, out, vocab, vocab, 1.0 / 0.7, hw, LOG2E_HI.item(), LOG2E_LO.item(), *COEFFS, BLOCK=b,
                    TILE=tile, num_warps=b // 128, enable_fp_fusion=False)
        base = None
        for name, launch in cases.items():
            ms, block = min((time_ms(lambda: launch(b)), b) for b in (512, 1024, 2048))
            base = base or ms
            bw = nbytes / ms / 1e6
            print(f"  {name:10} {ms:7.3f} ms  BLOCK {block:4}  {bw:6.0f} GB/s read = {bw / copy_bw:.2f} of copy"
                  f"  {ms / base:.2f}x float")


if __name__ == "__main__":
    main()
