"""The package on NumPy arrays (the CPU backend): the Rust library's results
bit for bit, layouts, typed errors, and the distribution of a verify batch."""

import numpy as np
import pytest

import specdec
from distribution import check_verify_batch
from reference import check_gumbel, check_rejection


def same(a):
    return a


def test_gumbel_sample_is_the_librarys():
    assert check_gumbel(np.asarray, np.asarray, same) == 3


def test_rejection_sample_is_the_librarys():
    assert check_rejection(np.asarray, np.asarray, same) == 4


def test_float16_logits_give_the_same_tokens():
    # The reference logits are quarters, exact in float16.
    half = lambda a: a.astype(np.float16)
    assert check_gumbel(np.asarray, np.asarray, half) == 3
    assert check_rejection(np.asarray, np.asarray, half) == 4


def batch(rows=5, vocab=50, seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        logits=rng.standard_normal((rows, vocab)).astype(np.float32),
        expanded_idx_mapping=np.arange(rows, dtype=np.int32) % 3,
        temperature=np.array([0.7, 1.0, 0.0], dtype=np.float32),
        seed=np.array([1, 2, 3], dtype=np.int64),
        pos=np.arange(rows, dtype=np.int64) + 10,
    )


def test_strided_rows_and_int64_inputs_are_taken_as_they_are():
    b = batch()
    want = specdec.gumbel_sample(**b)
    wide = np.zeros((5, 80), dtype=np.float32)
    wide[:, 7:57] = b["logits"]
    strided = dict(b, logits=wide[:, 7:57], expanded_idx_mapping=b["expanded_idx_mapping"].astype(np.int64))
    assert not strided["logits"].flags.c_contiguous
    np.testing.assert_array_equal(specdec.gumbel_sample(**strided), want)
    assert want.dtype == np.int64 and want.shape == (5,)


def test_logprobs_modes_and_shapes():
    b = batch()
    sampled, raw = specdec.gumbel_sample(**b, num_logprobs=2, logprobs_mode="raw")
    assert raw.logprobs.shape == (5, 3) and raw.logprob_token_ids.shape == (5, 3) and raw.selected_token_ranks.shape == (5,)
    # Raw: the log-softmax of the logits as given, T = 1.
    x = b["logits"].astype(np.float64)
    want = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(raw.logprobs[:, 0], want[np.arange(5), sampled], atol=1e-5)
    np.testing.assert_allclose(raw.logprobs[:, 1], want.max(axis=1), atol=1e-5)
    np.testing.assert_array_equal(raw.logprob_token_ids[:, 1], want.argmax(axis=1))
    np.testing.assert_array_equal(raw.selected_token_ranks, (want > want[np.arange(5), sampled][:, None]).sum(1) + 1)
    with pytest.raises(ValueError, match="logprobs_mode is 'soft'"):
        specdec.gumbel_sample(**b, num_logprobs=1, logprobs_mode="soft")


def test_out_receives_the_tokens():
    b = batch()
    out = np.full(5, -7, dtype=np.int32)
    assert specdec.gumbel_sample(**b, out=out) is out
    np.testing.assert_array_equal(out, specdec.gumbel_sample(**b))


def test_errors_carry_the_librarys_messages():
    b = batch()
    with pytest.raises(specdec.SpecdecError, match=r"slot 2 has temperature -1.0, expected 0 \(greedy\)"):
        specdec.gumbel_sample(**dict(b, temperature=np.array([0.7, 1.0, -1.0], dtype=np.float32)))
    with pytest.raises(specdec.SpecdecError, match="temperature: expected dtype float32, got float64"):
        specdec.gumbel_sample(**dict(b, temperature=b["temperature"].astype(np.float64)))
    with pytest.raises(specdec.SpecdecError, match=r"logits: expected a matrix \[rows, vocab\], got a tensor of shape \[250\]"):
        specdec.gumbel_sample(**dict(b, logits=b["logits"].reshape(-1)))
    with pytest.raises(specdec.SpecdecError, match="a row's logits must be adjacent"):
        specdec.gumbel_sample(**dict(b, logits=np.asfortranarray(b["logits"])))
    # Indices of another dtype than an integer are refused, not converted.
    with pytest.raises(specdec.SpecdecError, match="expanded_idx_mapping: expected dtype int32, got float32"):
        specdec.gumbel_sample(**dict(b, expanded_idx_mapping=b["expanded_idx_mapping"].astype(np.float32)))
    with pytest.raises(specdec.SpecdecError, match="positions has 4 elements, expected 5"):
        specdec.gumbel_sample(**dict(b, pos=b["pos"][:4]))
    # An int64 slot past the int32 range stays out of range (it is not wrapped to a valid one).
    with pytest.raises(specdec.SpecdecError, match="has slot 2147483647"):
        specdec.gumbel_sample(**dict(b, expanded_idx_mapping=np.array([0, 1, 2, 0, 2**32 + 1])))


def test_written_arrays_must_be_writable_and_apart_from_the_inputs():
    b = batch()
    frozen = np.zeros(5, dtype=np.int64)
    frozen.flags.writeable = False
    with pytest.raises(specdec.SpecdecError, match="sampled is read-only, and the call writes it"):
        specdec.gumbel_sample(**b, out=frozen)
    with pytest.raises(specdec.SpecdecError, match="sampled share memory with pos"):
        specdec.gumbel_sample(**b, out=b["pos"])
    cache = np.zeros((3, 2, 50), dtype=np.float32)
    with pytest.raises(specdec.SpecdecError, match="logits_cache share memory with logits"):
        specdec.gumbel_sample(
            **dict(b, logits=cache[0]), is_drafting=True, logits_cache=cache, logits_cache_col=0
        )


def test_rejection_errors_before_running():
    r = dict(
        target_logits=np.zeros((3, 10), dtype=np.float32),
        draft_logits=None,
        draft_tokens=np.array([1, 2, 0], dtype=np.int32),
        cu_num_logits=np.array([0, 3], dtype=np.int32),
        pos=np.arange(3, dtype=np.int64),
        idx_mapping=np.array([0], dtype=np.int32),
        temperature=np.array([1.0], dtype=np.float32),
        seed=np.array([5], dtype=np.int64),
        num_speculative_steps=2,
    )
    sampled, num_sampled = specdec.rejection_sample(**r)
    assert sampled.shape == (1, 3) and num_sampled.shape == (1,)
    with pytest.raises(specdec.SpecdecError, match="row 1 proposes draft token 12, expected -1"):
        specdec.rejection_sample(**dict(r, draft_tokens=np.array([1, 12, 0], dtype=np.int32)))
    with pytest.raises(specdec.SpecdecError, match="invalid request offsets"):
        specdec.rejection_sample(**dict(r, cu_num_logits=np.array([0, 2], dtype=np.int32)))
    with pytest.raises(TypeError, match="two verification rules"):
        specdec.rejection_sample(**r, use_block_verification=True, synthetic_conditional_rates=[1.0, 1.0])


@pytest.mark.parametrize("block", [False, True], ids=["token", "block"])
def test_a_verify_batch_emits_the_targets_distribution(block):
    check_verify_batch(np.asarray, np.asarray, block)
