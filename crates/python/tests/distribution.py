"""A verify batch as an engine runs one, in any framework (``put`` and ``get``
as in reference.py), and the chi-square of what it emits."""

import numpy as np
from scipy import stats

import specdec
from reference import Get, Put


def softmax(x, t):
    x = np.asarray(x, dtype=np.float64)
    z = np.exp((x - x.max()) / t)
    return z / z.sum()


TARGET_ROWS = np.array(
    [[0.5, 1.5, -0.5, 1.0, 0.0, 0.25], [1.25, -1.0, 0.5, 0.0, 2.0, -0.25], [0.0] * 6], dtype=np.float32
)
DRAFT_ROWS = np.array([[1.5, 0.5, 0.0, 1.0, -0.5, 0.75], [0.0, 0.5, 1.0, -0.5, 1.5, 0.0]], dtype=np.float32)
TEMPERATURE = 0.9


def verify_batch(put: Put, get: Get, block: bool, requests: int = 4000):
    """Requests that share a target and a draft model (K = 2 over 6 ids), each
    drafting with gumbel_sample into the cache as an engine does, then verified
    in one call. Returns the emitted tokens ``[requests, 3]``, the counts, and
    the target's distributions at positions 0 and 1."""
    k, vocab = DRAFT_ROWS.shape
    temperature = put(np.full(requests, TEMPERATURE, dtype=np.float32))
    seed = put(np.arange(requests, dtype=np.int64) * 7919 + 3)
    slots = put(np.arange(requests, dtype=np.int32))
    cache = put(np.zeros((requests, k, vocab), dtype=np.float32))
    drafts = np.zeros((requests, k + 1), dtype=np.int64)
    for column in range(k):
        # Draft `column` of every request, at position 100 + column.
        drafts[:, column] = get(
            specdec.gumbel_sample(
                put(np.tile(DRAFT_ROWS[column], (requests, 1))),
                slots,
                temperature,
                seed,
                put(np.full(requests, 100 + column, dtype=np.int64)),
                is_drafting=True,
                logits_cache=cache,
                logits_cache_col=column,
            )
        )
    sampled, num_sampled = specdec.rejection_sample(
        put(np.tile(TARGET_ROWS, (requests, 1))),
        cache,
        put(drafts.reshape(-1)),
        put(np.arange(requests + 1, dtype=np.int32) * (k + 1)),
        put(np.tile(np.arange(100, 100 + k + 1, dtype=np.int64), requests)),
        slots,
        temperature,
        seed,
        k,
        use_block_verification=block,
    )
    return get(sampled), get(num_sampled), [softmax(TARGET_ROWS[i], TEMPERATURE) for i in range(k)]


def chi_square_p(tokens, p):
    """The chi-square goodness-of-fit p-value of ``tokens`` against ``p``."""
    counts = np.bincount(tokens, minlength=len(p))
    return stats.chisquare(counts, p * counts.sum()).pvalue


def check_verify_batch(put: Put, get: Get, block: bool):
    """The first token of each request follows the target at position 0, the
    second (where a request emits one) at position 1; and the test can fail:
    the same tokens against the draft's distribution, or another
    temperature's, do."""
    sampled, num_sampled, (p0, p1) = verify_batch(put, get, block)
    first, second = sampled[:, 0], sampled[num_sampled >= 2, 1]
    assert len(second) > 1000
    assert chi_square_p(first, p0) > 1e-3
    assert chi_square_p(second, p1) > 1e-3
    assert chi_square_p(first, softmax(DRAFT_ROWS[0], TEMPERATURE)) < 1e-6
    assert chi_square_p(first, softmax(TARGET_ROWS[0], 0.6)) < 1e-6
