"""specdec: exact sampling and verification for speculative decoding, on any
DLPack tensor (PyTorch, CuPy, JAX, NumPy).

``gumbel_sample`` draws one token per row by Gumbel-max with per-request
temperature, seed and filters, noise keyed by position; ``rejection_sample``
verifies drafts against the target exactly (token by token, or as a block).
Both run on CUDA tensors zero-copy on the caller's current stream (PyTorch's
or CuPy's, or ``stream=``) with no host synchronisation, and on CPU tensors
through the CPU backend, which computes the same tokens. What they compute is
specified in the repository's ``docs/REFERENCE.md``.

Argument names follow the widely used engines' sampler functions
(``expanded_idx_mapping``, ``cu_num_logits``, ``idx_mapping``, ``pos``,
``temperature``, ``seed``, ``num_speculative_steps``, ``logits_cache``) where
the meaning is the same. Outputs are allocated beside the logits (PyTorch,
or any array-API namespace) unless ``out=`` gives them; give them, and make
one call first on the stream, to capture a call in a CUDA graph.
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Any, NamedTuple, Optional, Sequence, Tuple

from . import _specdec
from ._specdec import (
    INVALID_COLUMN,
    INVALID_DRAFT,
    INVALID_FILTER,
    INVALID_OFFSETS,
    INVALID_SLOT,
    INVALID_TEMPERATURE,
    NAN_LOGITS,
    SpecdecError,
    __version__,
)

__all__ = [
    "LogprobsTensors",
    "gumbel_sample",
    "rejection_sample",
    "take_status",
    "SpecdecError",
    "INVALID_SLOT",
    "INVALID_TEMPERATURE",
    "INVALID_COLUMN",
    "NAN_LOGITS",
    "INVALID_DRAFT",
    "INVALID_OFFSETS",
    "INVALID_FILTER",
]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_DL_CPU, _DL_CUDA = 1, 2


def _framework(x: Any) -> str:
    return type(x).__module__.split(".")[0]


def _is_torch(x: Any) -> bool:
    return _framework(x) == "torch"


def _dtype_name(x: Any) -> str:
    return str(x.dtype).rsplit(".", 1)[-1]


def _integer_bits(x: Any) -> Optional[int]:
    """The width of ``x``'s signed or unsigned integer dtype (negative for
    unsigned), or None for any other dtype. NumPy-like dtypes answer by
    ``kind`` (their names cost microseconds), PyTorch's by name."""
    dt = x.dtype
    kind = getattr(dt, "kind", None)
    if kind is not None:
        return {"i": 8, "u": -8}.get(kind, 0) * dt.itemsize or None
    name = _dtype_name(x)
    for prefix, sign in (("uint", -1), ("int", 1)):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return sign * int(name[len(prefix):])
    return None


def _empty(like: Any, shape: Tuple[int, ...], dtype: str) -> Any:
    """An uninitialised array of ``shape`` and ``dtype`` on ``like``'s device and framework."""
    if _is_torch(like):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    if _framework(like) == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=dtype)
    if _framework(like) in ("jax", "jaxlib"):
        raise TypeError("JAX arrays cannot be written: pass out= arrays of a framework whose arrays can (NumPy, CuPy)")
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is not None:
        xp = namespace()
        return xp.empty(shape, dtype=getattr(xp, dtype), device=like.device)
    if like.__dlpack_device__()[0] == _DL_CPU:
        import numpy

        return numpy.empty(shape, dtype=dtype)
    raise TypeError(f"specdec cannot allocate outputs beside a {type(like).__name__} on its device: pass out=")


def _as(x: Any, dtype: str) -> Any:
    """``x`` as ``dtype`` (``int32`` or ``int64``), converted by its own framework
    where it is another integer dtype (any other dtype is left for the call to
    refuse). An ``int64`` value outside the ``int32`` range is clamped to it, so
    that it stays out of range for the call's checks."""
    bits = None if x is None else _integer_bits(x)
    if bits is None or bits == int(dtype[len("int"):]):
        # Another dtype than an integer is the call's to refuse, with its own message.
        return x
    if dtype == "int32":
        x = x.clip(_INT32_MIN, _INT32_MAX)
    if _is_torch(x):
        import torch

        return x.to(getattr(torch, dtype))
    return x.astype(dtype)


def _stream(like: Any, stream: Optional[int]) -> int:
    """The raw ``CUstream`` a call on ``like``'s device runs on: ``stream`` if
    given, else PyTorch's or CuPy's current stream, else the legacy default (0)."""
    if stream is not None:
        return int(stream)
    kind, _ = like.__dlpack_device__()
    if kind != _DL_CUDA:
        return 0
    if _is_torch(like):
        import torch

        return torch.cuda.current_stream(like.device).cuda_stream
    if _framework(like) == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.cuda.get_current_stream().ptr
    return 0


def _on_stream(like: Any, stream: Optional[int]) -> Tuple[int, Any]:
    """The raw stream a call runs on (``_stream``), and a context in which the
    wrapper runs: where ``stream`` is given for a PyTorch or CuPy tensor, that
    stream made current, so that what the wrapper allocates and reads is
    ordered on it too."""
    raw = _stream(like, stream)
    if stream is None or like.__dlpack_device__()[0] != _DL_CUDA:
        return raw, contextlib.nullcontext()
    if _is_torch(like):
        import torch

        return raw, torch.cuda.stream(torch.cuda.ExternalStream(raw, device=like.device))
    if _framework(like) == "cupy":
        import cupy

        return raw, cupy.cuda.ExternalStream(raw)
    return raw, contextlib.nullcontext()


class LogprobsTensors(NamedTuple):
    """Log-probabilities of the emitted tokens, as engines return them
    (``num_logprobs=n``): per position, column 0 is the emitted token and
    columns ``1..n+1`` the ``n`` most likely ids (largest first, equal ones by
    smaller id), all under ``logprobs_mode``'s distribution. Positions no
    token was emitted at hold NaN and ``-1``."""

    #: int32 ``[..., n + 1]``
    logprob_token_ids: Any
    #: float32 ``[..., n + 1]``
    logprobs: Any
    #: int32 ``[...]``: 1 + the number of ids more likely than the emitted token.
    selected_token_ranks: Any


def _concat(like: Any, parts: Sequence[Any]) -> Any:
    """``parts`` joined along their last axis, by ``like``'s framework."""
    if _is_torch(like):
        import torch

        return torch.cat(list(parts), dim=-1)
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is not None:
        return namespace().concat(list(parts), axis=-1)
    import numpy

    return numpy.concatenate(list(parts), axis=-1)


class _LogprobOutputs:
    """The arrays a call writes its log-probabilities into, for ``shape``
    positions, and how they become a ``LogprobsTensors``."""

    def __init__(self, like: Any, shape: Tuple[int, ...], num_logprobs: int, mode: str):
        if mode not in ("processed", "raw"):
            raise ValueError(f"logprobs_mode is {mode!r}, expected 'processed' or 'raw'")
        self.like, self.raw = like, mode == "raw"
        self.emitted = _empty(like, shape, "float32")
        self.top = (
            _empty(like, shape + (num_logprobs,), "float32"),
            _empty(like, shape + (num_logprobs,), "int32"),
            _empty(like, shape, "int32"),
        )

    def kwargs(self) -> dict:
        return {
            "raw_logprobs" if self.raw else "logprobs": self.emitted,
            "top_logprobs": self.top,
            "top_logprobs_raw": self.raw,
        }

    def tensors(self, sampled: Any) -> LogprobsTensors:
        top_logprobs, top_ids, ranks = self.top
        ids = _as(sampled, "int32")
        return LogprobsTensors(
            _concat(self.like, [ids[..., None], top_ids]),
            _concat(self.like, [self.emitted[..., None], top_logprobs]),
            ranks,
        )


def gumbel_sample(
    logits: Any,
    expanded_idx_mapping: Any,
    temperature: Any,
    seed: Any,
    pos: Any,
    *,
    is_drafting: bool = False,
    logits_cache: Any = None,
    logits_cache_col: Any = None,
    top_k: Any = None,
    top_p: Any = None,
    min_p: Any = None,
    num_logprobs: Optional[int] = None,
    logprobs_mode: str = "processed",
    out: Any = None,
    stream: Optional[int] = None,
) -> Any:
    """One token per row of ``logits``: the argmax of ``logits / T + Gumbel noise``
    keyed by ``(seed, pos, token id)``, the argmax of the logits where ``T = 0``.

    - ``logits``: ``[num_tokens, V]`` float32, bfloat16 or float16, raw (before
      temperature); rows may be strided, the last stride must be 1.
    - ``expanded_idx_mapping``: ``[num_tokens]`` int32 or int64, each row's slot in
      the per-slot tables (``-1``: a padding row, greedy).
    - ``temperature``: ``[max_num_reqs]`` float32 (``0``: greedy);
      ``seed``: ``[max_num_reqs]`` int64 (its bits are the 64-bit seed).
    - ``pos``: ``[num_tokens]`` int64, each row's absolute position.
    - ``is_drafting``: noise from the draft stream (a draft model proposing tokens).
    - ``logits_cache``: ``[max_num_reqs, num_cols, >= V]`` float32, bfloat16 or
      float16 (any strides, last 1): each row's raw logits are stored at its slot
      and column ``logits_cache_col`` (an int, or ``[num_tokens]`` int32/int64),
      and, where the cache's dtype rounds them, the row is sampled as stored.
    - ``top_k`` (int32/int64), ``top_p``, ``min_p`` (float32): ``[max_num_reqs]``
      per-slot filters, each optional.
    - ``num_logprobs``: also return a ``LogprobsTensors`` of each token's
      log-probability and the top ``num_logprobs`` ids (0: the token's alone),
      under ``logprobs_mode``: ``"processed"`` (what the token was drawn from:
      temperature and filters applied) or ``"raw"`` (the logits' own softmax).
    - ``out``: ``[num_tokens]`` int64 or int32 for the tokens.

    Returns the tokens (``-1`` where a row's device-resident values were
    invalid; see ``take_status``), or ``(tokens, LogprobsTensors)``. Raises
    ``SpecdecError`` for arguments the call cannot take, before anything runs.
    """
    raw_stream, scope = _on_stream(logits, stream)
    with scope:
        sampled = out if out is not None else _empty(logits, (logits.shape[0],), "int64")
        outputs = None if num_logprobs is None else _LogprobOutputs(logits, (logits.shape[0],), num_logprobs, logprobs_mode)
        if isinstance(logits_cache_col, numbers.Integral):
            logits_cache_col = int(logits_cache_col)
        elif logits_cache_col is not None:
            logits_cache_col = _as(logits_cache_col, "int32")
        _specdec.gumbel_sample(
            logits,
            _as(expanded_idx_mapping, "int32"),
            temperature,
            seed,
            _as(pos, "int64"),
            sampled,
            top_k=_as(top_k, "int32"),
            top_p=top_p,
            min_p=min_p,
            is_drafting=is_drafting,
            logits_cache=logits_cache,
            logits_cache_col=logits_cache_col,
            stream=raw_stream,
            **(outputs.kwargs() if outputs else {}),
        )
        return sampled if outputs is None else (sampled, outputs.tensors(sampled))


def rejection_sample(
    target_logits: Any,
    draft_logits: Any,
    draft_tokens: Any,
    cu_num_logits: Any,
    pos: Any,
    idx_mapping: Any,
    temperature: Any,
    seed: Any,
    num_speculative_steps: int,
    *,
    top_k: Any = None,
    top_p: Any = None,
    min_p: Any = None,
    draft_top_k: Any = None,
    draft_top_p: Any = None,
    draft_min_p: Any = None,
    use_block_verification: bool = False,
    synthetic_conditional_rates: Optional[Sequence[float]] = None,
    num_logprobs: Optional[int] = None,
    logprobs_mode: str = "processed",
    out: Optional[Tuple[Any, Any]] = None,
    stream: Optional[int] = None,
) -> Tuple[Any, ...]:
    """Verify each request's drafts against the target, exactly: every
    emitted token follows the target's distribution (its argmax where ``T = 0``).

    - ``target_logits``: ``[num_logits, V]`` float32, bfloat16 or float16, raw.
      Request ``r`` owns rows ``cu_num_logits[r] .. cu_num_logits[r+1]``: one per
      draft, then its bonus row.
    - ``draft_logits``: ``[max_num_reqs, >= num_speculative_steps, >= V]`` the raw
      draft logits the drafts were sampled from (``gumbel_sample``'s
      ``logits_cache``), draft ``i`` of a request in column ``i`` of its slot; or
      ``None`` for one-hot drafts (EAGLE, MTP, n-gram).
    - ``draft_tokens``: ``[num_logits]`` int32/int64, the draft proposed at each
      row (``-1``: a placeholder, verification stops there); bonus rows' entries
      are ignored. An engine whose ``draft_sampled`` holds each row's input token
      passes it shifted by one row.
    - ``cu_num_logits``: ``[num_reqs + 1]`` int32/int64 row offsets;
      ``idx_mapping``: ``[num_reqs]`` each request's slot (``-1``: padding).
    - ``pos``: ``[num_logits]`` int64; ``temperature``, ``seed``: as ``gumbel_sample``.
    - ``num_speculative_steps``: K, the most drafts a request has.
    - ``top_k``, ``top_p``, ``min_p``: the target's per-slot filters;
      ``draft_top_k``, ``draft_top_p``, ``draft_min_p``: those the drafts were
      sampled with (with ``draft_logits``).
    - ``use_block_verification``: test the drafts jointly (block verification);
      ``synthetic_conditional_rates``: ``[K]`` acceptance rates, **not exact**, for
      benchmarking a deployment before its drafter exists.
    - ``num_logprobs``, ``logprobs_mode``: as ``gumbel_sample``'s, per token slot
      ``[num_reqs, K + 1]``.
    - ``out``: ``(sampled, num_sampled)``, ``[num_reqs, K + 1]`` int64/int32 and
      ``[num_reqs]`` int32.

    Returns ``(sampled, num_sampled)``: the accepted drafts, then the resampled
    or bonus token, then ``-1``; and the tokens emitted per request; with
    ``num_logprobs``, ``(sampled, num_sampled, LogprobsTensors)``.
    """
    raw_stream, scope = _on_stream(target_logits, stream)
    with scope:
        num_reqs = cu_num_logits.shape[0] - 1
        if out is None:
            out = (
                _empty(target_logits, (num_reqs, num_speculative_steps + 1), "int64"),
                _empty(target_logits, (num_reqs,), "int32"),
            )
        sampled, num_sampled = out
        shape = (num_reqs, num_speculative_steps + 1)
        outputs = None if num_logprobs is None else _LogprobOutputs(target_logits, shape, num_logprobs, logprobs_mode)
        rates = None
        if synthetic_conditional_rates is not None:
            values = synthetic_conditional_rates
            rates = [float(r) for r in (values.tolist() if hasattr(values, "tolist") else values)]
        _specdec.rejection_sample(
            target_logits,
            draft_logits,
            _as(draft_tokens, "int32"),
            _as(cu_num_logits, "int32"),
            _as(pos, "int64"),
            _as(idx_mapping, "int32"),
            temperature,
            seed,
            num_speculative_steps,
            sampled,
            num_sampled,
            top_k=_as(top_k, "int32"),
            top_p=top_p,
            min_p=min_p,
            draft_top_k=_as(draft_top_k, "int32"),
            draft_top_p=draft_top_p,
            draft_min_p=draft_min_p,
            use_block_verification=use_block_verification,
            synthetic_conditional_rates=rates,
            stream=raw_stream,
            **(outputs.kwargs() if outputs else {}),
        )
        if outputs is None:
            return sampled, num_sampled
        return sampled, num_sampled, outputs.tensors(sampled)


def take_status(like: Any, *, stream: Optional[int] = None) -> int:
    """The OR of the status flags (``NAN_LOGITS``, ``INVALID_SLOT``, ...) that
    calls on ``like``'s CUDA device and stream raised in device memory since the
    last ``take_status``: an invalid request's flags land only here (its tokens
    are ``-1``). Synchronises with the stream. On the CPU, whose checks raise
    ``SpecdecError``, it is 0.
    """
    kind, ordinal = like.__dlpack_device__()
    if kind != _DL_CUDA:
        return 0
    return _specdec.take_status(ordinal, _stream(like, stream))
