"""The Rust library's results on fixed inputs (reference.json, written and
checked by the suite's tests/python_reference.rs), and the package's calls on
the same inputs, in any framework: ``put`` makes an array of the caller's
framework from a NumPy one, ``get`` the reverse."""

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

import specdec

REFERENCE = json.loads((Path(__file__).parent / "reference.json").read_text())

Put = Callable[[np.ndarray], Any]
Get = Callable[[Any], np.ndarray]


def check_logprobs(got, want: dict, get: Get, tol: float, name: str):
    """``got`` (a LogprobsTensors) against the library's: equal on the CPU
    (``tol = 0``), within ``tol`` where another backend sums the log-sum-exps."""
    bits = lambda key: np.array(want[key], dtype=np.uint32).view(np.float32)
    top = bits("top_logprobs_bits").reshape(get(got.logprobs).shape[:-1] + (-1,))
    want_logprobs = np.concatenate([bits("logprobs_bits").reshape(top.shape[:-1] + (1,)), top], axis=-1)
    ids = np.array(want["top_ids"]).reshape(top.shape)
    np.testing.assert_array_equal(get(got.logprob_token_ids)[..., 1:], ids, err_msg=name)
    np.testing.assert_array_equal(get(got.selected_token_ranks).reshape(-1), want["ranks"], err_msg=name)
    if tol == 0:
        np.testing.assert_array_equal(get(got.logprobs), want_logprobs, err_msg=name)
    else:
        np.testing.assert_allclose(get(got.logprobs), want_logprobs, rtol=0, atol=tol, err_msg=name)


def table(put: Put, filtered: bool) -> dict:
    t = REFERENCE["table"]
    args = {
        "temperature": put(np.array(t["temperature"], dtype=np.float32)),
        "seed": put(np.array(t["seed"], dtype=np.int64)),
    }
    if filtered:
        args["top_k"] = put(np.array(t["top_k"], dtype=np.int32))
        args["top_p"] = put(np.array(t["top_p"], dtype=np.float32))
    return args


def check_gumbel(put: Put, get: Get, logits_dtype: Callable[[np.ndarray], Any], tol: float = 0) -> int:
    """Every gumbel_sample case, log-probabilities within ``tol``; returns how many were checked."""
    g = REFERENCE["gumbel_sample"]
    vocab = REFERENCE["vocab"]
    logits = logits_dtype(np.array(g["logits"], dtype=np.float32).reshape(g["rows"], vocab))
    for case in g["cases"]:
        kwargs = table(put, case["filtered"])
        if case["drafting"]:
            cache = put(np.zeros(case["cache_shape"], dtype=np.float32))
            kwargs.update(
                is_drafting=True,
                logits_cache=cache,
                logits_cache_col=put(np.array(case["cache_col"], dtype=np.int64)),
            )
        sampled, logprobs = specdec.gumbel_sample(
            logits,
            put(np.array(g["idx_mapping"], dtype=np.int32)),
            pos=put(np.array(g["pos"])),
            num_logprobs=REFERENCE["num_logprobs"],
            **kwargs,
        )
        np.testing.assert_array_equal(get(sampled), case["sampled"], err_msg=case["name"])
        np.testing.assert_array_equal(get(logprobs.logprob_token_ids)[:, 0], case["sampled"])
        check_logprobs(logprobs, case["logprobs"], get, tol, case["name"])
        if case["drafting"]:
            want = np.array(case["cache"], dtype=np.float32).reshape(case["cache_shape"])
            np.testing.assert_array_equal(get(cache), want, err_msg="the cache the call wrote")
    return len(g["cases"])


def check_rejection(put: Put, get: Get, logits_dtype: Callable[[np.ndarray], Any], tol: float = 0) -> int:
    """Every rejection_sample case, log-probabilities within ``tol``; returns how many were checked."""
    r = REFERENCE["rejection_sample"]
    vocab = REFERENCE["vocab"]
    target = logits_dtype(np.array(r["target_logits"], dtype=np.float32).reshape(r["rows"], vocab))
    draft = logits_dtype(np.array(r["draft_logits"], dtype=np.float32).reshape(r["draft_logits_shape"]))
    for case in r["cases"]:
        kwargs = table(put, case["filtered"])
        if case["filtered"]:
            kwargs.update(draft_top_k=kwargs["top_k"], draft_top_p=kwargs["top_p"])
        sampled, num_sampled, logprobs = specdec.rejection_sample(
            target,
            None if case["one_hot"] else draft,
            put(np.array(r["draft_tokens"], dtype=np.int64)),
            put(np.array(r["cu_num_logits"], dtype=np.int32)),
            put(np.array(r["pos"], dtype=np.int64)),
            put(np.array(r["idx_mapping"], dtype=np.int32)),
            num_speculative_steps=r["num_speculative_steps"],
            use_block_verification=case["block"],
            num_logprobs=REFERENCE["num_logprobs"],
            **kwargs,
        )
        np.testing.assert_array_equal(get(sampled), case["sampled"], err_msg=case["name"])
        np.testing.assert_array_equal(get(num_sampled), case["num_sampled"], err_msg=case["name"])
        check_logprobs(logprobs, case["logprobs"], get, tol, case["name"])
    return len(r["cases"])
