"""The package on PyTorch CUDA tensors: the Rust library's results bit for
bit, the CPU backend's on a large batch, the distribution of a verify batch,
the caller's stream, CUDA-graph capture, and flags raised in device memory.
Run on a machine with an NVIDIA GPU (crates/python/tests/gpu/run.sh); without
one these tests fail, they do not skip."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent.parent))

import specdec  # noqa: E402
from distribution import check_verify_batch  # noqa: E402
from reference import check_gumbel, check_rejection  # noqa: E402

assert torch.cuda.is_available(), "the GPU tests need a CUDA device"
CUDA = torch.device("cuda")


def put(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(CUDA)


def get(t: torch.Tensor) -> np.ndarray:
    return t.cpu().numpy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_the_librarys_results_on_cuda(dtype):
    # The reference logits are quarters, exact in every dtype: the tokens are the same. The
    # log-probabilities' log-sum-exps are summed in another order (REFERENCE §2.5, §8.3).
    as_dtype = lambda a: put(a).to(dtype)
    assert check_gumbel(put, get, as_dtype, tol=1e-5) == 3
    assert check_rejection(put, get, as_dtype, tol=1e-5) == 4


def large_batch(requests=32, k=4, vocab=151_936, seed=1):
    rng = np.random.default_rng(seed)
    rows = requests * (k + 1)
    return dict(
        target_logits=(rng.standard_normal((rows, vocab)) * 2).astype(np.float32),
        draft_logits=(rng.standard_normal((requests, k, vocab)) * 2).astype(np.float32),
        draft_tokens=rng.integers(0, vocab, rows).astype(np.int64),
        cu_num_logits=(np.arange(requests + 1) * (k + 1)).astype(np.int32),
        pos=np.arange(rows, dtype=np.int64) + 1000,
        idx_mapping=np.arange(requests, dtype=np.int32),
        temperature=np.where(np.arange(requests) % 4 == 0, 0.0, 0.8).astype(np.float32),
        seed=rng.integers(0, 2**62, requests).astype(np.int64),
        num_speculative_steps=k,
    )


def test_cuda_gives_the_cpu_backends_tokens_on_a_large_batch():
    b = large_batch()
    on_cpu = specdec.rejection_sample(**b)
    on_cuda = specdec.rejection_sample(**{k: put(v) if isinstance(v, np.ndarray) else v for k, v in b.items()})
    np.testing.assert_array_equal(get(on_cuda[0]), on_cpu[0])
    np.testing.assert_array_equal(get(on_cuda[1]), on_cpu[1])
    g = dict(
        logits=b["target_logits"],
        expanded_idx_mapping=np.arange(b["target_logits"].shape[0], dtype=np.int32) % 32,
        temperature=b["temperature"],
        seed=b["seed"],
        pos=b["pos"],
    )
    want = specdec.gumbel_sample(**g)
    np.testing.assert_array_equal(get(specdec.gumbel_sample(**{k: put(v) for k, v in g.items()})), want)


@pytest.mark.parametrize("block", [False, True], ids=["token", "block"])
def test_a_verify_batch_emits_the_targets_distribution_on_cuda(block):
    check_verify_batch(put, get, block)


def test_calls_run_on_the_callers_current_stream():
    b = large_batch(requests=8)
    want = specdec.rejection_sample(**b)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        # The side stream first sleeps, then copies the inputs in (from pinned memory, so the
        # copies wait on the stream, not on the host): a call on any other stream would read
        # them before they land.
        torch.cuda._sleep(200_000_000)
        args = {
            k: torch.from_numpy(np.ascontiguousarray(v)).pin_memory().to(CUDA, non_blocking=True)
            if isinstance(v, np.ndarray)
            else v
            for k, v in b.items()
        }
        sampled, num_sampled = specdec.rejection_sample(**args)
    side.synchronize()
    np.testing.assert_array_equal(get(sampled), want[0])
    np.testing.assert_array_equal(get(num_sampled), want[1])


def test_an_explicit_stream_orders_the_call_and_its_outputs():
    b = large_batch(requests=8)
    want = specdec.rejection_sample(**b)
    args = {k: put(v) if isinstance(v, np.ndarray) else v for k, v in b.items()}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    sampled, num_sampled = specdec.rejection_sample(**args, stream=side.cuda_stream)
    side.synchronize()
    np.testing.assert_array_equal(get(sampled), want[0])
    np.testing.assert_array_equal(get(num_sampled), want[1])


def test_a_call_captured_in_a_cuda_graph_replays_with_new_inputs():
    b = {k: put(v) if isinstance(v, np.ndarray) else v for k, v in large_batch(requests=8, vocab=32_000).items()}
    out = (torch.empty((8, 5), dtype=torch.int64, device=CUDA), torch.empty(8, dtype=torch.int32, device=CUDA))
    capture = torch.cuda.Stream()
    with torch.cuda.stream(capture):
        # One call first, on the capture stream: it makes the stream's workspace.
        specdec.rejection_sample(**b, out=out)
    capture.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        specdec.rejection_sample(**b, out=out)
    for seed in range(3):
        fresh = large_batch(requests=8, vocab=32_000, seed=10 + seed)
        for name in ("target_logits", "draft_logits", "draft_tokens", "seed"):
            b[name].copy_(put(fresh[name]))
        graph.replay()
        torch.cuda.synchronize()
        want = specdec.rejection_sample(**fresh)
        np.testing.assert_array_equal(get(out[0]), want[0])
        np.testing.assert_array_equal(get(out[1]), want[1])


def test_flags_raised_in_device_memory_come_back_from_take_status():
    logits = torch.zeros((3, 100), device=CUDA)
    logits[1, 7] = float("nan")
    temperature = torch.tensor([1.0, 0.5], device=CUDA)
    seed = torch.tensor([1, 2], device=CUDA)
    specdec.take_status(logits)  # whatever earlier tests on this stream raised
    specdec.gumbel_sample(logits[:1], torch.tensor([0], device=CUDA), temperature, seed, torch.arange(1, device=CUDA))
    assert specdec.take_status(logits) == 0
    # Slot 5 of a 2-slot table is a value only the device sees: flagged, not raised.
    tokens = specdec.gumbel_sample(
        logits, torch.tensor([0, 1, 5], device=CUDA), temperature, seed, torch.arange(3, device=CUDA)
    )
    assert get(tokens)[2] == -1
    flags = specdec.take_status(logits)
    assert flags & specdec.INVALID_SLOT and flags & specdec.NAN_LOGITS, flags
    assert specdec.take_status(logits) == 0


def test_host_checks_raise_before_launch_on_cuda():
    logits = torch.zeros((3, 100), device=CUDA)
    with pytest.raises(specdec.SpecdecError, match="temperature is on cpu, expected cuda:0"):
        specdec.gumbel_sample(
            logits,
            torch.zeros(3, dtype=torch.int32, device=CUDA),
            torch.ones(1),
            torch.ones(1, dtype=torch.int64, device=CUDA),
            torch.arange(3, device=CUDA),
        )


def test_the_readmes_example_runs():
    # The bundle puts the README beside the tests (python/README.md); in the tree it is the root's.
    here = Path(__file__).resolve()
    readme = next(p for p in (here.parents[2] / "README.md", here.parents[4] / "README.md") if p.is_file())
    text = readme.read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    scope = {}
    exec(compile(example, str(readme), "exec"), scope)
    k = scope["K"]
    n = int(scope["num_sampled"][0])
    assert 1 <= n <= k + 1
    assert (scope["sampled"][0, n:] == -1).all()
