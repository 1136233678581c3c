#!/usr/bin/env python3
"""PyTorch baseline for benches/gpu.rs: the same jobs written the way a user
writes them with torch, over the same case grid, timed the same way.

    python3 benches/torch_baseline.py [--out DIR] [--only REGEX] [--quick]
    python3 benches/torch_baseline.py --check     # CPU self-test of the math, no GPU
    python3 benches/torch_baseline.py --dry-run   # the whole run on CPU at V/64 (tests the script)

Writes DIR/torch.json (DIR: --out, else $OUT, else .) with one object per case,
named exactly as benches/gpu.rs names it, so `cargo xtask bench-report` can join
the two. Needs only torch (with CUDA for the timing run); numpy is not used.

The math (functions `sample_*` and `verify`, device-agnostic):
- greedy sampling: `argmax(logits)`.
- random sampling, two ways, both timed (the faster is the baseline):
  Gumbel-max `argmax(logits / T - log(-log(rand)))`, and
  `multinomial(softmax(logits / T), 1)`.
- drafting: random sampling plus storing the raw logits into bf16 draft logits
  `[slots, K, V]` at the rows' slots and one column (`draft_logits[slots, c] = logits`).
- verification of B requests with K drafts each (target rows B*(K+1)):
  greedy: accept while draft == argmax(target), emit the argmax at the first
  mismatch (or the bonus row's). Otherwise `p = softmax(target / T)`,
  `q = softmax(draft / T)` (one-hot drafts: q = onehot(d)), gather p(d), q(d),
  accept u < p(d)/q(d) while every earlier draft was accepted (cumulative
  product), at the first rejection sample the residual (p - q).clamp_min(0)
  normalised with multinomial, and when all K are accepted the bonus from the
  last row's p. Output tokens [B, K+1] padded with -1, num_emitted [B].
- sampling filters (`apply_filters`, the cases named `... T=1 +k50p0.9` etc.):
  on the fp32 scaled logits, min-p as `x >= max + ln(min_p)`, then one
  descending sort for top-k (`x >= k-th largest`) and top-p (keep while the
  softmax mass before a value is < top_p, over the survivors), the rest set
  to -inf and scattered back; then the sampling or verification above (the
  target's p filtered, the draft logits' q not). Each filtered case runs
  beside the same call unfiltered at the same T = 1 (the name less the `+`
  suffix), and its time over that call's is printed and stored as
  `filtered_ratio`.

Timing (as in benches/gpu.rs): per case, an eager warm-up, then the call is
captured in a CUDA graph (torch.cuda.graph) and replayed; a case whose capture
fails is timed as eager calls instead (its "method" says so). Each timed
replay is preceded by zeroing a 512 MiB tensor (L2 flush) and bracketed by
torch.cuda.Event records; the median of 50 replays is reported (20 for a case
whose first replay takes over 5 ms). The same timing of a graph of one tiny
kernel, and of two dependent ones, is the run's "floor": what no call of one
(two) launches can go below.

Inputs mirror benches/gpu.rs: N(0,1) target logits; draft logits
0.8*target + 0.6*noise in bf16; drafts sampled from the draft logits at T (their
argmax for greedy); T = 0.8; Zipf-like rows -1.1*ln(rank+1) with ranks permuted
per row for the one Zipf case.
"""

import argparse
import json
import math
import os
import re
import sys
import time

import torch

# The case grid of benches/gpu.rs.
SAMPLE_VOCABS = [32000, 128256, 151936, 262144]
SAMPLE_ROWS = [1, 8, 64, 256, 1024]
VERIFY_REQUESTS = [1, 16, 64, 256]
VERIFY_DRAFTS = [1, 3, 7]
VERIFY_VOCABS = [32000, 151936]
ENGINE_REQUESTS = [2, 4, 8, 32]  # the batches serving engines run (verification at V_MAIN, f32 and bf16 targets)
ENGINE_DRAFTS = [2, 4, 5]
QUICK_REQUESTS = [1, 64, 256]  # --quick
V_MAIN = 151936
T = 0.8
MAX_ROWS = 2048  # B = 256 requests of K + 1 = 8 rows
LOGITS_LEN = MAX_ROWS * V_MAIN  # covers 2048 x 151936 and 1024 x 262144
DRAFT_SLOTS, DRAFT_K, DRAFT_COLUMN = 1024, 8, 3
# The filtered cases (as benches/gpu.rs): (top_k, top_p, min_p), off values 0, 1, 0; all at FILTER_T.
FILTER_T = 1.0
FILTER_OFF = (0, 1.0, 0.0)
VERIFY_FILTERS = [(50, 0.9, 0.0), (20, 1.0, 0.0), (0, 1.0, 0.05), (0, 0.95, 0.0)]
SAMPLE_FILTERS = [(50, 0.9, 0.0)]
FILTER_BATCHES = [(1, 7), (64, 7), (256, 7), (1, 4)]  # (B, K): bf16 draft logits, f32 target, V_MAIN

REPS, REPS_LONG, LONG_US = 50, 20, 5000.0
FLUSH_BYTES = 512 << 20


def gumbel_name(mode, zipf, vocab, rows):
    dtype = "f32->bf16" if mode == "drafting" else "f32"
    return f"gumbel_sample {mode} {dtype}{' zipf' if zipf else ''} V={vocab} rows={rows}"


def rejection_name(mode, target_dtype, b, k, vocab):
    return f"rejection_sample {mode} {target_dtype} B={b} K={k} V={vocab}"


def filter_name(filt):
    """The name suffix of benches/gpu.rs: none (no filter, at T), " T=1" (unfiltered, at FILTER_T), " T=1 +k50p0.9"."""
    if filt is None:
        return ""
    top_k, top_p, min_p = filt
    name = f" T={FILTER_T:g}"
    if filt != FILTER_OFF:
        name += " +"
    if top_k > 0:
        name += f"k{top_k}"
    if top_p < 1.0:
        name += f"p{top_p:g}"
    if min_p > 0.0:
        name += f"minp{min_p:g}"
    return name


def filter_dict(filt):
    return None if filt is None else dict(top_k=filt[0], top_p=filt[1], min_p=filt[2])


def verify_grid(vocab, quick):
    """The verification cases at `vocab` as (mode, target dtype, B, K, filter): those of benches/gpu.rs's grid."""
    modes = ["greedy", "one-hot", "bf16-draft"]
    grid = [(m, "f32", b, k, None) for m in modes for k in VERIFY_DRAFTS for b in VERIFY_REQUESTS]
    if vocab == V_MAIN:
        grid += [(m, "bf16", 64, 3, None) for m in modes] + [("bf16-draft", "f32", 1, 4, None)]
        grid += [
            (m, target_dtype, b, k, None)
            for target_dtype in ["f32", "bf16"]
            for m in modes
            for k in ENGINE_DRAFTS
            for b in ENGINE_REQUESTS
        ]
        # Filtered, each beside the same call unfiltered (FILTER_OFF) at FILTER_T.
        grid += [("bf16-draft", "f32", b, k, f) for b, k in FILTER_BATCHES for f in [FILTER_OFF] + VERIFY_FILTERS]
    if quick:
        grid = [case for case in grid if case[2] in QUICK_REQUESTS]
    return grid


# ---------------------------------------------------------------------------
# The math, the way a user writes it. Device-agnostic: --check runs it on CPU.
# ---------------------------------------------------------------------------


def sample_greedy(logits, temps=None):
    return torch.argmax(logits, dim=-1)


def sample_gumbel(logits, temps):
    """Gumbel-max: argmax(logits / T - log(-log(u))), u ~ U[0, 1). temps: [rows, 1]."""
    u = torch.rand_like(logits, dtype=torch.float32)
    return torch.argmax(logits / temps - torch.log(-torch.log(u)), dim=-1)


def sample_multinomial(logits, temps):
    """probs = softmax(logits / T), one draw per row."""
    probs = torch.softmax(logits / temps, dim=-1)
    return torch.multinomial(probs, 1).squeeze(-1)


SAMPLERS = {"gumbel-argmax": sample_gumbel, "softmax-multinomial": sample_multinomial}


def apply_filters(x, filt):
    """Sort-based top-k / top-p / min-p on scaled fp32 logits x [..., V]: the ids filtered out set to -inf.

    min-p keeps x >= max + ln(min_p) (p >= min_p * p_max); top-k keeps x >= the k-th largest (ties kept);
    top-p keeps, of the survivors sorted descending, each value whose softmax mass before it is < top_p.
    """
    top_k, top_p, min_p = filt
    x = x.float()
    if min_p > 0.0:
        x = x.masked_fill(x < x.amax(dim=-1, keepdim=True) + math.log(min_p), -math.inf)
    if top_k > 0 or top_p < 1.0:
        sorted_x, idx = torch.sort(x, dim=-1, descending=True)
        if top_k > 0:
            sorted_x = sorted_x.masked_fill(sorted_x < sorted_x[..., top_k - 1 : top_k], -math.inf)
        if top_p < 1.0:
            probs = torch.softmax(sorted_x, dim=-1)
            sorted_x = sorted_x.masked_fill(probs.cumsum(dim=-1) - probs >= top_p, -math.inf)
        x = x.scatter(-1, idx, sorted_x)
    return x


def sample_filtered(sampler, logits, temps, filt):
    """Random sampling of the filtered scaled logits (FILTER_OFF: the plain sampler)."""
    if filt == FILTER_OFF:
        return sampler(logits, temps)
    return sampler(apply_filters(logits / temps, filt), 1.0)


def sample_drafting(sampler, logits, temps, draft_logits, slots, column):
    """Sample (draft noise is just more torch.rand), then store the raw logits in the draft logits."""
    tokens = sampler(logits, temps)
    draft_logits[slots, column] = logits.to(draft_logits.dtype)
    return tokens


def verify(target, draft, drafts, temps, mode, filt=None):
    """Rejection sampling of B requests with K drafts each.

    target: [B*(K+1), V] raw logits (request r owns rows r*(K+1) .. r*(K+1)+K, the last its bonus row);
    draft: [B, K, V] raw draft logits, or None (mode "one-hot" or "greedy");
    drafts: [B, K] int64 draft tokens; temps: [B] per-request temperature;
    mode: "greedy" | "one-hot" | "bf16-draft"; filt: the target's (top_k, top_p, min_p), or None (the draft
    logits are never filtered).
    Returns (tokens [B, K+1] padded with -1, num_emitted [B]).
    """
    b, k = drafts.shape
    v = target.shape[-1]
    dev = target.device
    req = torch.arange(b, device=dev)
    if mode == "greedy":
        top = torch.argmax(target, dim=-1).view(b, k + 1)
        n_acc = (drafts == top[:, :k]).int().cumprod(dim=1).sum(dim=1)
        last = top[req, n_acc]  # the argmax at the first mismatch, or the bonus row's
    else:
        t_rows = temps[:, None].expand(b, k + 1).reshape(-1, 1)  # each request's T on each of its rows
        scaled = target / t_rows
        if filt is not None and filt != FILTER_OFF:
            scaled = apply_filters(scaled, filt)
        p = torch.softmax(scaled, dim=-1, dtype=torch.float32).view(b, k + 1, v)
        p_d = p[:, :k].gather(2, drafts[..., None]).squeeze(2)
        if mode == "one-hot":
            q = None
            q_d = torch.ones_like(p_d)
        else:
            q = torch.softmax(draft / temps[:, None, None], dim=-1, dtype=torch.float32)
            q_d = q.gather(2, drafts[..., None]).squeeze(2)
        u = torch.rand_like(p_d)
        n_acc = (u < p_d / q_d).int().cumprod(dim=1).sum(dim=1)
        j = n_acc.clamp(max=k - 1)  # the first rejected draft (unused when all are accepted)
        p_j = p[req, j]
        if q is None:
            residual = p_j.scatter(1, drafts[req, j][:, None], 0.0)  # (p - onehot(d))+ = p without d
        else:
            residual = (p_j - q[req, j]).clamp_min(0.0)
        residual = residual / residual.sum(dim=-1, keepdim=True)
        dist = torch.where((n_acc == k)[:, None], p[:, k], residual)
        last = torch.multinomial(dist, 1).squeeze(1)
    pos = torch.arange(k + 1, device=dev)[None, :]
    n = n_acc[:, None]
    padded = torch.cat([drafts, drafts.new_full((b, 1), -1)], dim=1)
    tokens = torch.where(pos < n, padded, torch.where(pos == n, last[:, None], -1))
    return tokens, n_acc + 1


# ---------------------------------------------------------------------------
# CPU self-test (--check): the math above gives the right distributions.
# ---------------------------------------------------------------------------


def chi2_ok(counts, probs, what):
    """SPEC §6: merge bins with expectation < 5, pass iff chi2 < df + 10*sqrt(2 df)."""
    n = float(counts.sum())
    exp = probs.double() * n
    big = exp >= 5
    obs_b, exp_b = counts[big].double(), exp[big]
    other_o, other_e = counts[~big].double().sum(), exp[~big].sum()
    if other_e >= 5:
        obs_b = torch.cat([obs_b, other_o[None]])
        exp_b = torch.cat([exp_b, other_e[None]])
    chi2 = float(((obs_b - exp_b) ** 2 / exp_b).sum())
    df = max(len(exp_b) - 1, 1)
    limit = df + 10 * math.sqrt(2 * df)
    ok = chi2 < limit
    print(f"  {'ok  ' if ok else 'FAIL'} {what}: chi2 {chi2:.1f} (df {df}, limit {limit:.1f})")
    return ok


def check():
    torch.manual_seed(1234)
    ok = True
    n, v = 200_000, 12
    row = torch.randn(v) * 2
    logits = row.expand(n, v).contiguous()
    temps = torch.full((n, 1), T)
    p = torch.softmax(row / T, dim=-1)
    for name, sampler in SAMPLERS.items():
        counts = torch.bincount(sampler(logits, temps), minlength=v)
        ok &= chi2_ok(counts, p, f"{name} sampling")
    greedy = sample_greedy(logits)
    ok &= bool((greedy == row.argmax()).all())
    # Filters: the kept sets of a row of distinct values, and sampling from the filtered distribution.
    x = torch.tensor([3.0, 1.0, 2.0, 0.0, -1.0, 2.5])  # softmax: 0.50, 0.07, 0.18, 0.03, 0.01, 0.30
    kept = lambda f: sorted(torch.nonzero(apply_filters(x, f) > -math.inf).flatten().tolist())  # noqa: E731
    good = kept((2, 1.0, 0.0)) == [0, 5] and kept((0, 0.7, 0.0)) == [0, 5] and kept((0, 1.0, 0.3)) == [0, 2, 5]
    good &= kept((0, 0.4, 0.0)) == [0] and kept((3, 0.7, 0.0)) == [0, 5] and kept(FILTER_OFF) == list(range(6))
    print(f"  {'ok  ' if good else 'FAIL'} filter kept sets")
    ok &= good
    for name, sampler in SAMPLERS.items():
        filt = (8, 0.95, 0.0)
        counts = torch.bincount(sample_filtered(sampler, logits, temps, filt), minlength=v)
        p_filtered = torch.softmax(apply_filters(row / T, filt), dim=-1)
        ok &= chi2_ok(counts, p_filtered, f"{name} sampling, filter {filt}")

    # Drafting stores the raw logits (bf16) at the rows' slots, column 3 only.
    draft_logits = torch.zeros(8, DRAFT_K, v, dtype=torch.bfloat16)
    lg = torch.randn(3, v)
    slots = torch.tensor([5, 0, 2])
    sample_drafting(sample_gumbel, lg, torch.full((3, 1), T), draft_logits, slots, DRAFT_COLUMN)
    written = torch.zeros(8, DRAFT_K, dtype=torch.bool)
    written[slots, DRAFT_COLUMN] = True
    stored = bool((draft_logits[slots, DRAFT_COLUMN] == lg.bfloat16()).all())
    good = stored and bool((draft_logits[~written] == 0).all())
    print(f"  {'ok  ' if good else 'FAIL'} drafting draft-logits write")
    ok &= good

    # Verification: every request identical; each emitted position must be distributed as p at that position.
    b, k, v = 200_000, 3, 10
    t_rows = torch.randn(k + 1, v) * 1.5
    d_rows = 0.7 * t_rows[:k] + 0.7 * torch.randn(k, v)
    temps = torch.full((b,), T)
    target = t_rows.repeat(b, 1)
    q = torch.softmax(d_rows / T, dim=-1)
    verify_checks = [("bf16-draft", None), ("one-hot", None), ("bf16-draft", (4, 0.9, 0.0)), ("one-hot", (0, 1.0, 0.2))]
    for mode, filt in verify_checks:
        scaled = t_rows / T if filt is None else apply_filters(t_rows / T, filt)
        p = torch.softmax(scaled, dim=-1)
        draft = d_rows.to(torch.bfloat16).expand(b, k, v) if mode == "bf16-draft" else None
        # Drafts ~ the q the verifier sees (the bf16-rounded draft logits); any q for one-hot drafts.
        q_seen = torch.softmax(d_rows.to(torch.bfloat16).float() / T, dim=-1) if draft is not None else q
        drafts = torch.stack([torch.multinomial(q_seen[i], b, replacement=True) for i in range(k)], dim=1)
        tokens, emitted = verify(target, draft, drafts, temps, mode, filt)
        good = bool(((emitted >= 1) & (emitted <= k + 1)).all())
        good &= bool(((tokens >= 0).sum(dim=1) == emitted).all())
        ok &= good
        for i in range(k + 1):
            # Position i is emitted iff the first i drafts were accepted; given that, it is ~ p_i.
            sel = emitted > i
            counts = torch.bincount(tokens[sel, i], minlength=v)
            ok &= chi2_ok(counts, p[i], f"verify {mode}{'' if filt is None else f', filter {filt}'}: position {i} ({int(sel.sum())} emitted)")
        print(f"       accepted per request {float((emitted - 1).float().mean()):.2f}")
    # Greedy: output = the target argmax chain.
    top = t_rows.argmax(dim=-1)
    drafts = torch.stack([top[:k]] * 4)
    drafts[1, 1] = (top[1] + 1) % v  # request 1: mismatch at draft 1
    drafts[2, 0] = (top[0] + 1) % v  # request 2: mismatch at draft 0
    tokens, emitted = verify(t_rows.repeat(4, 1), None, drafts, torch.zeros(4), "greedy")
    want = torch.full((4, k + 1), -1)
    want[0] = top
    want[3] = top
    want[1, :2] = top[:2]
    want[2, :1] = top[:1]
    good = bool((tokens == want).all()) and emitted.tolist() == [k + 1, 2, 1, k + 1]
    print(f"  {'ok  ' if good else 'FAIL'} verify greedy: argmax chain")
    ok &= good
    print("check: ok" if ok else "check: FAILED")
    return 0 if ok else 1


# ---------------------------------------------------------------------------
# The timing run (needs CUDA; --dry-run walks it on the CPU at small sizes).
# ---------------------------------------------------------------------------


class Timer:
    def __init__(self):
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def once(self, run):
        self.flush.zero_()
        self.start.record()
        run()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1000.0

    def time(self, name, fn):
        """(median µs, reps, method, outputs): CUDA-graph replays of fn, else eager calls."""
        fn()  # eager warm-up: kernels load, the allocator fills
        torch.cuda.synchronize()
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = fn()
            graph.replay()
            torch.cuda.synchronize()
            run, method = graph.replay, "graph"
        except Exception as e:  # noqa: BLE001 - any capture failure falls back to eager timing
            first_line = (str(e).strip().splitlines() or [""])[0]
            print(f"  {name}: CUDA graph capture failed ({type(e).__name__}: {first_line}); timing eager calls")
            torch.cuda.synchronize()
            graph, run, method = None, fn, "eager"
        first = self.once(run)
        reps = REPS_LONG if first > LONG_US else REPS
        times = sorted(self.once(run) for _ in range(reps))
        if graph is None:
            outputs = fn()
        torch.cuda.synchronize()
        del graph
        return times[reps // 2], reps, method, outputs


def fail(name, message):
    print(f"error: {name}: {message}", file=sys.stderr)
    sys.exit(1)


class DryRunTimer:
    """--dry-run: runs each case a few times on the CPU, wall-clock timed (tests the script, measures nothing)."""

    def time(self, name, fn):
        outputs = fn()
        times = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e6)
        return sorted(times)[1], 3, "cpu-dry-run", outputs


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run(out_dir, only, quick, dry_run):
    started = time.time()
    if dry_run:
        dev, timer, device_name = torch.device("cpu"), DryRunTimer(), "cpu (dry run)"
    else:
        if not torch.cuda.is_available():
            fail("setup", "torch sees no CUDA device (the timing run needs one; --check and --dry-run run on CPU)")
        dev = torch.device("cuda")
        device_name = torch.cuda.get_device_name(dev)
        timer = Timer()
    print(f"device: {device_name}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    torch.manual_seed(1)
    selected = re.compile(only) if only else None
    sample_vocabs = [V_MAIN] if quick else SAMPLE_VOCABS
    verify_vocabs = [V_MAIN] if quick else VERIFY_VOCABS

    t0 = time.time()
    base = torch.randn(LOGITS_LEN, device=dev)
    draft_flat = (0.8 * base + 0.6 * torch.randn(LOGITS_LEN, device=dev)).to(torch.bfloat16)
    ranks = torch.argsort(torch.rand(1024, V_MAIN, device=dev), dim=1)
    zipf = -1.1 * torch.log1p(ranks.float())
    del ranks
    temps_all = torch.full((MAX_ROWS,), T, device=dev)
    filter_temps_all = torch.full((MAX_ROWS,), FILTER_T, device=dev)
    slots_all = torch.arange(MAX_ROWS, device=dev)
    sync(dev)
    print(f"inputs made in {time.time() - t0:.1f} s")
    cases = []

    # The floor of this timing: what a call of one launch, or of two dependent
    # ones, cannot go below (graph replay, events, a kernel's start and end).
    tiny = torch.zeros(1, device=dev)
    one_us = timer.time("floor: one tiny kernel", lambda: tiny.add_(1))[0]
    two_us = timer.time("floor: two dependent tiny kernels", lambda: tiny.add_(1).mul_(1))[0]
    floor = {"one_kernel_us": round(one_us, 2), "two_kernels_us": round(two_us, 2)}
    print(f"floor: a graph of one tiny kernel {one_us:.1f} µs, of two dependent ones {two_us:.1f} µs")

    def record(case, variants, outputs_check, accepted=None):
        best = min(variants, key=lambda name: variants[name]["us"])
        case.update(
            us=round(variants[best]["us"], 2),
            reps=variants[best]["reps"],
            method=variants[best]["method"],
            variant=best,
            variants=variants,
            accepted_per_request=accepted,
        )
        # A filtered case's time over the same call's unfiltered, measured just before it.
        unfiltered = case.pop("unfiltered_case", None)
        base_us = next((c["us"] for c in cases if c["case"] == unfiltered), None)
        if base_us is not None:
            ratio = round(case["us"] / base_us, 4)
            case.update(unfiltered_case=unfiltered, unfiltered_us=base_us, filtered_ratio=ratio)
        cases.append(case)
        others = ", ".join(f"{n} {r['us']:.1f} µs ({r['method']})" for n, r in variants.items())
        extra = f", {accepted:.2f} accepted per request" if accepted is not None else ""
        print(f"{case['case']:<58} {case['us']:>9.1f} µs  [{others}]{extra}")
        if base_us is not None:
            what = "  filtered / unfiltered"
            print(f"{what:<58} {case['filtered_ratio']:>9.2f} × the unfiltered call ({base_us:.1f} µs)")
        outputs_check()

    def unfiltered_name(name, filt):
        """The unfiltered call beside a filtered case (None for the others)."""
        return name.split(" +")[0] if filt is not None and filt != FILTER_OFF else None

    def wanted(name):
        return selected is None or selected.search(name)

    # Sampling.
    for vocab in sample_vocabs:
        draft_logits = None
        for mode in ["greedy", "random", "drafting"]:
            for rows in SAMPLE_ROWS:
                name = gumbel_name(mode, False, vocab, rows)
                if not wanted(name):
                    continue
                logits = base[: rows * vocab].view(rows, vocab)
                temps = temps_all[:rows, None]
                slots = slots_all[:rows]
                if mode == "drafting" and draft_logits is None:
                    draft_logits = torch.zeros(DRAFT_SLOTS, DRAFT_K, vocab, dtype=torch.bfloat16, device=dev)
                variants, outputs = {}, None
                samplers = {"argmax": sample_greedy} if mode == "greedy" else SAMPLERS
                for vname, sampler in samplers.items():
                    if mode == "drafting":
                        fn = lambda s=sampler: sample_drafting(s, logits, temps, draft_logits, slots, DRAFT_COLUMN)  # noqa: E731
                    else:
                        fn = lambda s=sampler: s(logits, temps)  # noqa: E731
                    us, reps, method, outputs = timer.time(name, fn)
                    variants[vname] = {"us": us, "reps": reps, "method": method}

                    def outputs_check(tokens=outputs, name=name, vocab=vocab):
                        t = tokens.cpu()
                        if bool(((t < 0) | (t >= vocab)).any()):
                            fail(name, "token out of range")

                    outputs_check()
                case = dict(
                    case=name, op="gumbel_sample", mode=mode, logits_dtype="f32",
                    draft_dtype="bf16" if mode == "drafting" else None, input="normal", vocab=vocab, rows=rows,
                    requests=None, max_drafts=None, temperature=0.0 if mode == "greedy" else T,
                    latency=rows == 1 and vocab == V_MAIN and mode == "random",
                )
                record(case, variants, lambda: None)
        draft_logits = None  # free it before the next vocabulary's
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    name = gumbel_name("random", True, V_MAIN, 1024)
    if wanted(name):
        temps = temps_all[:1024, None]
        variants = {}
        for vname, sampler in SAMPLERS.items():
            us, reps, method, outputs = timer.time(name, lambda s=sampler: s(zipf, temps))
            variants[vname] = {"us": us, "reps": reps, "method": method}
        case = dict(
            case=name, op="gumbel_sample", mode="random", logits_dtype="f32", draft_dtype=None, input="zipf",
            vocab=V_MAIN, rows=1024, requests=None, max_drafts=None, temperature=T, latency=False,
        )
        record(case, variants, lambda: None)
    zipf = None

    # Filtered sampling at FILTER_T, beside the same call unfiltered.
    sample_name = gumbel_name("random", False, V_MAIN, 1024)
    sample_cases = [(f, sample_name + filter_name(f)) for f in [FILTER_OFF] + SAMPLE_FILTERS]
    partners = {unfiltered_name(n, f) for f, n in sample_cases if wanted(n)}
    for filt, name in sample_cases:
        if not (wanted(name) or name in partners):
            continue
        logits = base[: 1024 * V_MAIN].view(1024, V_MAIN)
        temps = filter_temps_all[:1024, None]
        variants = {}
        for vname, sampler in SAMPLERS.items():
            us, reps, method, outputs = timer.time(name, lambda s=sampler: sample_filtered(s, logits, temps, filt))
            variants[vname] = {"us": us, "reps": reps, "method": method}
            t = outputs.cpu()
            if bool(((t < 0) | (t >= V_MAIN)).any()):
                fail(name, "token out of range")
        case = dict(
            case=name, op="gumbel_sample", mode="random", logits_dtype="f32", draft_dtype=None, input="normal",
            vocab=V_MAIN, rows=1024, requests=None, max_drafts=None, temperature=FILTER_T, latency=False,
            filter=filter_dict(filt), unfiltered_case=unfiltered_name(name, filt),
        )
        record(case, variants, lambda: None)

    # Verification.
    for vocab in verify_vocabs:
        draft_rows = draft_flat[: MAX_ROWS * vocab].view(MAX_ROWS, vocab)
        sampled = sample_gumbel(draft_rows, temps_all[:, None])  # drafts ~ q
        greedy_drafts = torch.argmax(draft_rows, dim=-1)
        grid = verify_grid(vocab, quick)
        # A filtered case kept keeps the unfiltered call it is compared with.
        names = [rejection_name(m, dt, b, k, vocab) + filter_name(f) for m, dt, b, k, f in grid]
        partners = {unfiltered_name(n, c[4]) for n, c in zip(names, grid) if wanted(n)}
        for (mode, target_dtype, b, k, filt), name in zip(grid, names):
            if not (wanted(name) or name in partners):
                continue
            rows = b * (k + 1)
            target = base[: rows * vocab].view(rows, vocab)
            if target_dtype == "bf16":
                target = target.to(torch.bfloat16)
            source = greedy_drafts if mode == "greedy" else sampled
            drafts = source[:rows].view(b, k + 1)[:, :k].contiguous()
            draft = None
            if mode == "bf16-draft":
                draft = draft_rows[:rows].view(b, k + 1, vocab)[:, :k].contiguous()
            if mode == "greedy":
                temps = torch.zeros(b, device=dev)
            else:
                temps = (temps_all if filt is None else filter_temps_all)[:b]
            us, reps, method, (tokens, emitted) = timer.time(
                name, lambda: verify(target, draft, drafts, temps, mode, filt)
            )
            tokens, emitted = tokens.cpu(), emitted.cpu()

            def outputs_check(tokens=tokens, emitted=emitted, name=name, k=k, vocab=vocab):
                if bool(((emitted < 1) | (emitted > k + 1)).any()):
                    fail(name, "num_emitted out of range")
                valid = (tokens >= 0) & (tokens < vocab)
                if bool((valid.sum(dim=1) != emitted).any()) or bool(((tokens < -1) | (tokens >= vocab)).any()):
                    fail(name, "tokens out of range or padding misplaced")

            case = dict(
                case=name, op="rejection_sample", mode=mode, logits_dtype=target_dtype,
                draft_dtype="bf16" if mode == "bf16-draft" else None, input="normal", vocab=vocab, rows=rows,
                requests=b, max_drafts=k, temperature=0.0 if mode == "greedy" else (T if filt is None else FILTER_T),
                latency=b == 1 and k == 4 and filt is None, filter=filter_dict(filt),
                unfiltered_case=unfiltered_name(name, filt),
            )
            accepted = float((emitted - 1).float().mean())
            way = "argmax-verify" if mode == "greedy" else "softmax-verify"
            record(case, {way: {"us": us, "reps": reps, "method": method}}, outputs_check, round(accepted, 3))

    wall_s = time.time() - started
    result = {
        "device": device_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "unix_time": int(time.time()),
        "wall_s": round(wall_s, 1),
        "reps": REPS,
        "reps_long": REPS_LONG,
        "long_us": LONG_US,
        "flush_bytes": FLUSH_BYTES,
        "temperature": T,
        "quick": quick,
        "floor": floor,
        "cases": cases,
    }
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "torch.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    eager = [c["case"] for c in cases if c["method"] == "eager"]
    print(f"{len(cases)} cases in {wall_s:.0f} s ({len(eager)} timed eagerly: no CUDA graph)")
    print(f"wrote {path}")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="where torch.json goes (default: $OUT or .)")
    parser.add_argument("--only", help="time only the cases whose name matches this regular expression")
    parser.add_argument("--quick", action="store_true", help="V = 151936 only, B in {1, 64, 256}")
    parser.add_argument("--check", action="store_true", help="CPU self-test of the math (no GPU), then exit")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run the whole script on the CPU with every vocabulary divided by 64 (tests the script; times nothing real)",
    )
    args = parser.parse_args()
    if args.check:
        return check()
    if args.dry_run:
        global SAMPLE_VOCABS, VERIFY_VOCABS, V_MAIN, LOGITS_LEN
        SAMPLE_VOCABS = [v // 64 for v in SAMPLE_VOCABS]
        VERIFY_VOCABS = [v // 64 for v in VERIFY_VOCABS]
        V_MAIN //= 64
        LOGITS_LEN = MAX_ROWS * V_MAIN
    return run(args.out, args.only, args.quick, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
