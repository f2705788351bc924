"""The training forward on the lean runtime: completion hidden states with each group's prompt
run once, differentiable, optionally padding-free and checkpointed (reasoning_rl.policy.lean)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from reasoning_rl.policy.lean.layers import (
    LayerWeights,
    additive_mask,
    attention,
    decoder_layer,
    final_norm,
    layer_weights,
    prompt_mask,
    rope_tables,
)

PACK_MIN_PADDING = 0.15
"""The training forward drops right padding (runs the needed completion positions as one
packed sequence) when at least this fraction of the completion positions is padding. Packing
costs a gather and a scatter per layer: on the 1M-parameter benchmark model it breaks even at
about 10% padding and is 30% faster at 47% (docs/performance.md)."""


def completion_logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor, completion_start: int, group_size: int,
                      checkpoint: bool = False) -> torch.Tensor:
    """Completion logits ``[B, L, V]`` (differentiable): ``W_lm`` applied to
    :func:`completion_hidden` (same arguments), the contract of
    ``reasoning_rl.policy.hf_forward.shared_prompt_forward``. The training log-probs apply the LM head
    themselves, a chunk of positions at a time (``reasoning_rl.policy.lm_head``)."""
    hidden = completion_hidden(model, input_ids, attention_mask, position_ids, completion_start, group_size,
                               checkpoint)
    return F.linear(hidden, model.lm_head.weight, model.lm_head.bias)


def completion_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor, completion_start: int, group_size: int,
                      checkpoint: bool = False) -> torch.Tensor:
    """Last hidden states after the final norm ``[B, L, D]`` whose LM-head logits predict the
    completion tokens (differentiable): rows ``i*G .. i*G+G-1`` share one left-padded prompt
    ``input_ids[:, :P]``, completions ``[:, P:]`` are right-padded; the prompt's last position
    predicts completion token 0, completion token t predicts token t + 1.

    Each distinct prompt runs once; its keys and values are repeated G times
    (``repeat_interleave``: the G copies' gradients add up in the shared prompt) and the
    completion tokens attend to them and causally to each other. Right padding needs no mask:
    a pad sits after every real token of its row, so causality hides it. When at least
    ``PACK_MIN_PADDING`` of the completion positions are padding, the needed ones (those whose
    target is a real token) go through the projections and the MLP as one ``[1, N, D]``
    sequence, and only attention sees the rows' layout (:class:`_Packing`); the padded
    positions' hidden states are then 0 (the caller masks them). The projections are not fused
    here: with autograd on, concatenating the weights and splitting their gradient cost more than
    the matmuls it saves (3-5% slower on the 1M benchmark model, 8% on the 34M one).

    ``checkpoint``: each decoder layer runs under ``torch.utils.checkpoint`` (non-reentrant), so
    the backward keeps only each layer's input and recomputes the rest (gradient checkpointing,
    Chen et al. 2016): the same values and gradients, one more forward of compute."""
    n, width = input_ids.shape
    p, g = completion_start, group_size
    valid = attention_mask[::g, :p].bool()  # [U, P]
    cos, sin = rope_tables(model, position_ids)  # [B, 1, W, d]
    h = F.embedding(input_ids[::g, :p], model.model.embed_tokens.weight)  # [U, P, D]
    # Names the checkpointed layers read are bound once: a recompute in the backward sees the same tensors.
    prompt_bias = additive_mask(prompt_mask(valid), h.dtype)  # [U, 1, P, P]
    weights = layer_weights(model)
    prompt_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
    last = len(weights) - 1
    prompt_cos, prompt_sin = cos[::g, :, :p], sin[::g, :, :p]  # [U, 1, P, d]
    for i, w in enumerate(weights):
        def prompt_layer(h: torch.Tensor, w: LayerWeights = w, last_only: bool = i == last) -> tuple[torch.Tensor, ...]:
            kv: list[torch.Tensor] = []

            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                kv.extend((k.repeat_interleave(g, dim=0), v.repeat_interleave(g, dim=0)))  # [B, H_kv, P, d]
                return attention(q, k, v, prompt_bias[:, :, -q.shape[2]:])
            # The prompt's last layer: keys and values of every position, output of the last only.
            return decoder_layer(w, h, prompt_cos, prompt_sin, attend, last_only=last_only), *kv
        h, prompt_k, prompt_v = _run_layer(prompt_layer, checkpoint, h)
        prompt_kv.append((prompt_k, prompt_v))
    first = final_norm(model, h[:, -1:]).repeat_interleave(g, dim=0)  # [B, 1, D]: predicts completion token 0
    if width - p == 1:
        return first
    length = width - p - 1
    causal = torch.ones(length, length, dtype=torch.bool, device=input_ids.device).tril()
    bias = additive_mask(torch.cat([valid.repeat_interleave(g, dim=0)[:, None, None, :].expand(n, 1, length, p),
                                    causal.expand(n, 1, length, length)], dim=-1), h.dtype)  # [B, 1, L-1, P+L-1]
    cos, sin = cos[:, :, p:-1], sin[:, :, p:-1]  # [B, 1, L-1, d]
    # Input t of a completion is needed only when its target t + 1 is a real token; the others
    # are right padding, after every real token of their row.
    needed = attention_mask[:, p + 1:].bool()  # [B, L-1]
    padding = 1.0 - float(needed.sum()) / needed.numel()
    # Padding-free when it pays: the needed inputs of all rows as one sequence of N tokens
    # [1, N, D] through the projections and the MLP; only attention sees the rows' layout.
    rows = _Packing(needed) if padding >= PACK_MIN_PADDING else None
    inputs = input_ids[:, p:-1]  # [B, L-1]
    if rows is None:
        h = F.embedding(inputs, model.model.embed_tokens.weight)  # [B, L-1, D]
    else:
        h = F.embedding(rows.pack(inputs), model.model.embed_tokens.weight)[None]  # [1, N, D]
        cos, sin = (rows.pack(t.squeeze(1))[None, None] for t in (cos, sin))  # [1, 1, N, d]
    for w, (prompt_k, prompt_v) in zip(weights, prompt_kv):
        def completion_layer(h: torch.Tensor, prompt_k: torch.Tensor, prompt_v: torch.Tensor,
                             w: LayerWeights = w) -> torch.Tensor:
            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                if rows is not None:  # [1, heads, N, d] -> [B, heads, L-1, d]
                    q, k, v = (rows.unpack(x[0].transpose(0, 1)).transpose(1, 2) for x in (q, k, v))
                out = attention(q, torch.cat([prompt_k, k], dim=2), torch.cat([prompt_v, v], dim=2), bias)
                return out if rows is None else rows.pack(out.transpose(1, 2)).transpose(0, 1)[None]  # [1, H, N, d]
            return decoder_layer(w, h, cos, sin, attend)
        h = _run_layer(completion_layer, checkpoint, h, prompt_k, prompt_v)
    hidden = final_norm(model, h) if rows is None else rows.unpack(final_norm(model, h[0]))  # [B, L-1, D]
    return torch.cat([first, hidden], dim=1)  # [B, L, D]


def _run_layer(layer: Callable[..., Any], checkpoint: bool, *inputs: torch.Tensor) -> Any:
    """``layer(*inputs)``, under non-reentrant ``torch.utils.checkpoint`` when ``checkpoint``."""
    if not checkpoint:
        return layer(*inputs)
    return torch.utils.checkpoint.checkpoint(layer, *inputs, use_reentrant=False)


class _Packing:
    """Between a right-padded ``[B, L, ...]`` layout and the ``[N, ...]`` sequence of its N
    needed positions (``needed`` ``[B, L]``, row-major order). Both ways are differentiable."""

    def __init__(self, needed: torch.Tensor) -> None:
        self.shape = needed.shape
        self.index = needed.flatten().nonzero().squeeze(1)  # [N]

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, L, ...]`` -> ``[N, ...]``."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, ...]`` -> ``[B, L, ...]``, zeros at the positions that are not needed."""
        flat = x.new_zeros((self.shape.numel(), *x.shape[1:])).index_copy(0, self.index, x)
        return flat.view(*self.shape, *x.shape[1:])
