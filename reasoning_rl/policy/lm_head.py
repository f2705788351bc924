"""Log-probs (and entropy) of chosen tokens straight from the last hidden states, the LM head
applied a chunk of positions at a time: no ``[N, V]`` tensor larger than one chunk, in the
forward or the backward.

For hidden states ``h_i`` (``[N, D]``, after the final norm), the LM head ``W`` (``[V, D]``, bias
``b``), targets ``y_i`` and temperature T, per position i:

    z_i    = (W h_i + b) / T                        float32, whatever the compute dtype
    lse_i  = logsumexp_v z_iv                        (over the sampling support when top-k / top-p)
    logp_i = z_{i, y_i} - lse_i
    H_i    = lse_i - sum_v p_iv z_iv,   p_iv = exp(z_iv - lse_i)

and the backward, from g_i = dLoss / dlogp_i:

    dLoss/dz_iv = g_i (1[v = y_i] - p_iv)
    dLoss/dh_i  = (1/T) sum_v dLoss/dz_iv W_v        dLoss/dW = (1/T) sum_i dLoss/dz_i^T h_i

:func:`token_logprobs` keeps only ``h``, ``W`` and ``lse`` (``[N]``) for the backward, which
recomputes each chunk's logits: one extra ``[c, D] x [D, V]`` matmul per chunk, in exchange for
holding ``c x V`` logits instead of the several ``N x V`` copies autograd keeps for
``log_softmax(h W^T)`` (the logits, the log-softmax or softmax, the entropy's products). The
logsumexp runs in float32 even when the model computes in bfloat16 ("fp32 LM head"). The entropy
is a metric: computed in the same pass when asked, without a gradient.

Chunk size: ``model.lm_head_chunk`` (``reasoning_rl.policy.loading.ModelConfig``): ``auto``
(:func:`resolve_chunk`), ``0`` (off: full logits, autograd's own graph) or N positions.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from reasoning_rl.errors import UserError

AUTO_MIN_VOCAB = 4096
"""``lm_head_chunk: auto`` chunks from this vocabulary size up. Below it, full logits are a small
share of a training step's memory (the tiny model's 100 tokens: 400 bytes a position against
~60 KB of stored activations) and the plain autograd graph is as fast or faster
(docs/performance.md)."""

AUTO_CHUNK_LOGITS = 1 << 25
"""``auto`` chunk size in logits: ``max(1, AUTO_CHUNK_LOGITS // V)`` positions, 128 MiB of float32
logits per chunk (682 positions of SmolLM2's 49,152 tokens, 220 of Qwen2.5's 151,936)."""

_ATTRIBUTE = "_reasoning_rl_lm_head_chunk"


class LMHeadChunkError(UserError, ValueError):
    """A ``model.lm_head_chunk`` value that is not ``auto``, 0 or a positive number of positions."""


def resolve_chunk(setting: str | int, vocab_size: int) -> int:
    """Positions per LM-head chunk for ``model.lm_head_chunk`` = ``setting``; 0 means no chunking.

    ``auto``: 0 when ``vocab_size < AUTO_MIN_VOCAB``, else ``max(1, AUTO_CHUNK_LOGITS // vocab_size)``."""
    text = str(setting).strip().lower()
    if text == "auto":
        return 0 if vocab_size < AUTO_MIN_VOCAB else max(1, AUTO_CHUNK_LOGITS // vocab_size)
    if not text.isdigit():
        raise LMHeadChunkError(f"model.lm_head_chunk={setting!r} is not auto, 0 or a number of positions; "
                               "use auto (chunk large vocabularies), 0 (off) or e.g. 512")
    return int(text)


def set_chunk(model: Any, positions: int) -> None:
    """Record on ``model`` the LM-head chunk its training log-probs use (:func:`chunk_of`)."""
    setattr(model, _ATTRIBUTE, positions)


def chunk_of(model: Any) -> int:
    """The chunk recorded by :func:`set_chunk`, else ``auto`` for the model's vocabulary."""
    recorded = getattr(model, _ATTRIBUTE, None)
    return recorded if recorded is not None else resolve_chunk("auto", model.config.get_text_config().vocab_size)


def describe_chunk(setting: str | int, vocab_size: int) -> str:
    """One line for the run's start: what ``model.lm_head_chunk`` resolved to, and why."""
    rows = resolve_chunk(setting, vocab_size)
    how = f"{rows} positions a chunk" if rows else "off (full logits)"
    why = f"auto, vocabulary {vocab_size:,}" if str(setting).strip().lower() == "auto" else "set"
    return f"LM head: {how} ({why})"


def sampling_support(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Which tokens the sampler could draw: top-k, then top-p (nucleus) over what is left, the
    order and ties of transformers' TopKLogitsWarper / TopPLogitsWarper; at least one kept.  # [..., V] bool

    top-p keeps the smallest set of most likely tokens whose probability reaches ``top_p``:
    sorted ascending, a token is dropped when the cumulative probability up to it is <= 1 - top_p.
    """
    keep = torch.ones_like(logits, dtype=torch.bool)
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # [..., 1]
        keep = logits >= kth
    if top_p < 1.0:
        masked = logits.masked_fill(~keep, float("-inf"))
        sorted_logits, order = torch.sort(masked, dim=-1, descending=False)
        drop_sorted = sorted_logits.softmax(dim=-1).cumsum(dim=-1) <= (1.0 - top_p)
        drop_sorted[..., -1:] = False
        keep = keep & ~drop_sorted.scatter(-1, order, drop_sorted)
    return keep


def token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                   temperature: float = 1.0, *, chunk: int, with_entropy: bool = False, top_k: int = 0,
                   top_p: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log softmax((hidden W^T + b) / T)[i, targets_i]`` ``[N]`` float32, and the entropy ``[N]``
    (no gradient) when asked, ``chunk`` positions at a time (module docstring).

    ``hidden`` ``[N, D]``, ``weight`` ``[V, D]``, ``bias`` ``[V]`` or None, ``targets`` ``[N]``. With
    ``top_k`` / ``top_p`` the softmax is over the tokens the sampler could draw
    (:func:`sampling_support`). Gradients reach ``hidden``, ``weight`` and ``bias``."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 position, got {chunk}")
    logp, entropy = _ChunkedTokenLogprobs.apply(hidden, weight, bias, targets, float(temperature), chunk,
                                                top_k, top_p, with_entropy)
    return logp, entropy if with_entropy else None


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float,
                  top_k: int, top_p: float) -> torch.Tensor:
    """z = (h W^T + b) / T in float32, -inf outside the sampling support.  # [c, V]"""
    z = F.linear(h, weight, bias).float()  # a fresh tensor either way: in-place below is safe
    if temperature != 1.0:
        z = z.div_(temperature)
    if top_k or top_p < 1.0:
        z = z.masked_fill_(~sampling_support(z, top_k, top_p), float("-inf"))
    return z


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """The autograd function behind :func:`token_logprobs`: saves ``hidden``, ``W``, ``b`` and
    ``lse`` ``[N]``; the backward recomputes each chunk's logits."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, temperature: float, chunk: int, top_k: int, top_p: float,
                with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)  # [N]
        lse = torch.empty_like(logp)  # [N]
        entropy = torch.empty(n if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            z = _chunk_logits(hidden[s:e], weight, bias, temperature, top_k, top_p)  # [c, V]
            chosen = z.gather(-1, targets[s:e, None]).squeeze(-1)  # [c]
            if with_entropy:  # one more [c, V] buffer, the probabilities; the rest in place
                top = z.amax(-1, keepdim=True)  # [c, 1]: at least one token is in the support
                p = (z - top).exp_()  # [c, V]
                total = p.sum(-1, keepdim=True)  # [c, 1]
                lse_c = (top + total.log()).squeeze(-1)  # [c]
                p.div_(total)
                # sum_v p_v z_v as a batched dot product (no [c, V] product); tokens outside the
                # support have p = 0 and z = -inf, set to 0 so that they add 0, not NaN.
                z = z.nan_to_num_(neginf=0.0)
                entropy[s:e] = lse_c - torch.bmm(p[:, None, :], z[:, :, None]).view(-1)
                del p
            else:
                lse_c = torch.logsumexp(z, dim=-1)  # [c]
            del z
            lse[s:e] = lse_c
            logp[s:e] = chosen - lse_c
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.settings = temperature, chunk, top_k, top_p
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor, _grad_entropy: torch.Tensor) -> tuple[Any, ...]:
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        temperature, chunk, top_k, top_p = ctx.settings
        need_h, need_w = ctx.needs_input_grad[:2]
        need_b = bias is not None and ctx.needs_input_grad[2]
        grad_h = torch.empty_like(hidden) if need_h else None  # [N, D]
        # Accumulated over chunks in float32 whatever the weight's dtype, cast once at the end.
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None  # [V, D]
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b else None
        n = hidden.shape[0]
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            h = hidden[s:e]  # [c, D]
            z = _chunk_logits(h, weight, bias, temperature, top_k, top_p)  # [c, V], recomputed
            g = grad_logp[s:e].float()  # [c]
            # dLoss/dz = g (onehot(y) - p), then dz/dlogits = 1/T; in place: one [c, V] buffer.
            dz = z.sub_(lse[s:e, None]).exp_().mul_(-g[:, None])  # [c, V]: -g p
            dz.scatter_add_(-1, targets[s:e, None], g[:, None])
            if temperature != 1.0:
                dz.div_(temperature)
            dlogits = dz.to(hidden.dtype)  # [c, V]
            if need_h:
                grad_h[s:e] = dlogits @ weight
            if need_w:
                if dlogits.dtype == torch.float32:
                    grad_w.addmm_(dlogits.t(), h)
                else:
                    grad_w.add_(dlogits.t() @ h)
            if need_b:
                grad_b.add_(dz.sum(0))
        return (grad_h, None if grad_w is None else grad_w.to(weight.dtype),
                None if grad_b is None else grad_b.to(bias.dtype), None, None, None, None, None, None)
