"""A lean forward for Llama-family decoders, read straight from the model's own parameters.

For a small model on a CPU, a forward through the transformers module stack costs more in
framework work than in arithmetic: cache objects, mask builders, per-layer keyword plumbing,
RMSNorm and RoPE as chains of small ops. This module computes what ``LlamaForCausalLM`` /
``Qwen2ForCausalLM`` compute, with the same parameter tensors (no copies), in a handful of
tensor ops per layer:

    h_0 = E[x]
    per layer:  a = RMSNorm(h);  q, k, v = a W_q^T (+ b_q), a W_k^T (+ b_k), a W_v^T (+ b_v)
                q, k = RoPE(q, pos), RoPE(k, pos)                       the model's own cos/sin
                h = h + softmax(q k^T / sqrt(d) + mask) v W_o^T
                b = RMSNorm(h);  h = h + (silu(b W_gate^T) * (b W_up^T)) W_down^T
    logits = RMSNorm(h) W_lm^T

RMSNorm is ``torch.nn.functional.rms_norm`` (with its own backward); RoPE is
``x cos + roll(x, d/2) sin_signed`` (``rotate_half`` without its slices and concatenation; the
sign flip is exact); RoPE's cos/sin are computed once per batch for every position by the
model's rotary module, so every ``rope_type`` it supports is honoured.

Two users:

- :class:`LeanDecoder` (``rollout.backend=native``): prefill, then one step per new token
  against a key/value cache preallocated at ``[B, H_kv, P + T, d]`` per layer and written in
  place; each distinct prompt is prefilled once; a step's attention stacks the query heads that
  share a key/value head as rows of one matmul (grouped-query attention without repeating keys).
- :func:`completion_logits` (the trainer's log-probs, ``reasoning_rl.logprobs``): each group's
  prompt once, then the completions against its keys and values, differentiable.

Both equal the module forward up to float rounding: ``tests/reasoning_rl/test_decode.py``
checks every decode step and the training logits and gradients against it, for Llama and
Qwen2, with left padding and grouped-query attention. Models it does not know, or features it
does not implement (sliding-window layers, per-head q/k norms, a non-SiLU MLP, adapter or
quantised layers, forward hooks, sharded parameters), are refused by
:func:`lean_decoder_support`, and callers then run the model's own modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

FUSE_MAX_PARAMETERS = 50_000_000
"""Fuse projections up to this size: below it a decode step is bound by kernel launches and
the transient weight copy is small; above it matmuls dominate and the copy would cost memory."""

SUPPORTED_CLASSES = ("LlamaForCausalLM", "Qwen2ForCausalLM")


def lean_decoder_support(model: Any) -> str | None:
    """None when :class:`LeanDecoder` computes exactly what ``model`` computes; otherwise the
    reason it does not (the native engine then runs the model's own modules)."""
    name = type(model).__name__
    if name not in SUPPORTED_CLASSES:
        return f"{name} is not one of {', '.join(SUPPORTED_CLASSES)}"
    cfg = model.config
    if getattr(cfg, "hidden_act", None) != "silu":
        return f"hidden_act={cfg.hidden_act!r} (only silu)"
    if "sliding_attention" in (getattr(cfg, "layer_types", None) or []):
        return "sliding-window attention layers"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "rotary_emb") or not hasattr(inner, "layers"):
        return "no model.model.layers / model.model.rotary_emb"
    for layer in inner.layers:
        attn = layer.self_attn
        if hasattr(attn, "q_norm") or hasattr(attn, "k_norm"):
            return "per-head q/k normalisation"
        if getattr(attn, "sliding_window", None):
            return "sliding-window attention"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            if type(getattr(attn, proj, None)) is not torch.nn.Linear:
                return f"self_attn.{proj} is not a plain nn.Linear (an adapter or quantised layer)"
        for proj in ("gate_proj", "up_proj", "down_proj"):
            if type(getattr(layer.mlp, proj, None)) is not torch.nn.Linear:
                return f"mlp.{proj} is not a plain nn.Linear (an adapter or quantised layer)"
    if type(inner.embed_tokens) is not torch.nn.Embedding or type(model.lm_head) is not torch.nn.Linear:
        return "the embedding or the LM head is not a plain nn.Embedding / nn.Linear"
    for name, module in model.named_modules():
        if module._forward_hooks or module._forward_pre_hooks:
            return f"forward hooks on {name or 'the model'} (they would be skipped)"
    if any(type(p) is not torch.nn.Parameter for p in model.parameters()):
        return "parameters that are not plain tensors (sharded or wrapped)"
    return None




def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * (x / sqrt(mean(x^2) + eps))``, computed in float32 and cast back before the
    weight, as ``LlamaRMSNorm`` does (Zhang & Sennrich 2019)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps=eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """RoPE (Su et al. 2021) in the half-split layout: ``x cos + rotate_half(x) sin``, where
    ``rotate_half(x) = [-x_2, x_1]`` equals ``roll(x, d/2) * [-1, +1]`` and the sign is folded into
    ``sin_signed = [-sin_1, sin_2]``."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed


def rope_tables(model: Any, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin_signed ``[B, 1, S, d]`` (broadcast over heads) for position ids ``[B, S]``,
    from the model's own rotary module."""
    embed = model.model.embed_tokens.weight
    cos, sin = model.model.rotary_emb(embed[:1], positions)  # [B, S, d] each
    half = cos.shape[-1] // 2
    return cos.unsqueeze(1), torch.cat([-sin[..., :half], sin[..., half:]], dim=-1).unsqueeze(1)


def prompt_mask(valid: torch.Tensor) -> torch.Tensor:
    """``[B, 1, P, P]`` boolean mask of left-padded prompts (``valid`` ``[B, P]``): causal, padding
    keys hidden; a padding query may see itself, so no softmax row is empty (its output is never
    attended to: its key is hidden)."""
    p = valid.shape[1]
    causal = torch.ones(p, p, dtype=torch.bool, device=valid.device).tril()
    return (causal & valid[:, None, None, :]) | torch.eye(p, dtype=torch.bool, device=valid.device)


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(q ``[B, H, L, d]``, k, v ``[B, H_kv, L, d]`` of the new positions) -> attention output ``[B, H, L, d]``."""


class FusedProjections:
    """One layer's q/k/v and gate/up weights concatenated, so each group is one matmul: fewer
    kernel launches where launches cost more than arithmetic (a small model's decode step). A
    copy, taken under ``torch.inference_mode`` for one ``generate`` call."""

    def __init__(self, layer: Any) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = _concat(attn.q_proj, attn.k_proj, attn.v_proj)
        self.gate_up = _concat(mlp.gate_proj, mlp.up_proj)


def _concat(*linears: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    weight = torch.cat([m.weight for m in linears])
    if all(m.bias is None for m in linears):
        return weight, None
    return weight, torch.cat([m.bias if m.bias is not None else weight.new_zeros(m.out_features) for m in linears])


def decoder_layer(model: Any, layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  attend: Attend, fused: FusedProjections | None = None) -> torch.Tensor:
    """Hidden states ``h`` ``[B, L, D]`` through one decoder layer; ``attend`` decides which keys
    and values the new positions see (a cache, a shared prompt's, their own)."""
    cfg = model.config
    b, length, _ = h.shape
    heads, d = cfg.num_attention_heads, _head_dim(cfg)
    attn, mlp = layer.self_attn, layer.mlp
    a = rms_norm(h, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
    if fused is not None:  # one matmul, and one rotation of q and k together
        qkv = F.linear(a, *fused.qkv).view(b, length, -1, d).transpose(1, 2)  # [B, H + 2 H_kv, L, d]
        kv = (qkv.shape[1] - heads) // 2
        qk = rotate(qkv[:, :heads + kv], cos, sin)
        att = attend(qk[:, :heads], qk[:, heads:], qkv[:, heads + kv:])  # [B, H, L, d]
    else:
        q, k, v = (F.linear(a, m.weight, m.bias).view(b, length, -1, d).transpose(1, 2)
                   for m in (attn.q_proj, attn.k_proj, attn.v_proj))  # [B, heads, L, d]
        att = attend(rotate(q, cos, sin), rotate(k, cos, sin), v)  # [B, H, L, d]
    h = h + F.linear(att.transpose(1, 2).reshape(b, length, heads * d), attn.o_proj.weight, attn.o_proj.bias)
    m = rms_norm(h, layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon)
    if fused is not None:
        gate, up = F.linear(m, *fused.gate_up).chunk(2, dim=-1)
    else:
        gate, up = F.linear(m, mlp.gate_proj.weight, mlp.gate_proj.bias), F.linear(m, mlp.up_proj.weight, mlp.up_proj.bias)
    return h + F.linear(F.silu(gate) * up, mlp.down_proj.weight, mlp.down_proj.bias)


def next_token_logits(model: Any, h: torch.Tensor) -> torch.Tensor:
    """``RMSNorm(h) W_lm^T``: logits ``[..., V]`` of hidden states ``[..., D]``."""
    norm = model.model.norm
    return F.linear(rms_norm(h, norm.weight, norm.variance_epsilon), model.lm_head.weight, model.lm_head.bias)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d) + mask) v`` over all heads (boolean ``mask``, True = visible)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=q.shape[-1] ** -0.5,
                                          enable_gqa=q.shape[1] != k.shape[1])


def _head_dim(cfg: Any) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


class LeanDecoder:
    """Prefill a left-padded batch of prompts, then one :meth:`step` per new token.

    Shapes: ``B`` rows, ``P`` prompt positions, ``T`` new tokens at most, ``H`` query heads and
    ``H_kv`` key/value heads of size ``d``. Call under ``torch.inference_mode``, and build one per ``generate`` call: with
    ``fuse`` (the default for models of at most ``FUSE_MAX_PARAMETERS`` parameters) it holds
    :class:`FusedProjections` copies of the weights as they were when it was built."""

    def __init__(self, model: Any, fuse: bool | None = None) -> None:
        reason = lean_decoder_support(model)
        if reason is not None:
            raise ValueError(f"LeanDecoder cannot run this model: {reason}")
        self.model = model
        self.layers = list(model.model.layers)
        if fuse is None:
            fuse = sum(p.numel() for p in model.parameters()) <= FUSE_MAX_PARAMETERS
        self.fused = [FusedProjections(layer) for layer in self.layers] if fuse else [None] * len(self.layers)
        self.num_kv_heads = getattr(model.config, "num_key_value_heads", None) or model.config.num_attention_heads
        self.head_dim = _head_dim(model.config)
        self.release()

    def release(self) -> None:
        """Free the key/value cache."""
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._cos = self._sin = self._bias = None
        self._length = 0

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Run the prompts ``[B, P]`` (left-padded; ``attention_mask`` 1 on real tokens), make room
        for ``max_new_tokens``, and return the next-token logits ``[B, V]``.

        Positions count from each row's first real token (``cumsum(mask) - 1``, as ``generate``
        does); new token t of a row sits at position ``n_real + t``. Rows holding the same prompt
        (a group's G samples) are run once and their keys and values copied: causal attention
        makes a prompt's cache independent of what follows it."""
        b, p = input_ids.shape
        total = p + max_new_tokens
        device = input_ids.device
        dtype = self.model.model.embed_tokens.weight.dtype
        prompt_pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [B, P]
        new_pos = attention_mask.sum(-1, keepdim=True) + torch.arange(max_new_tokens, device=device)  # [B, T]
        self._cos, self._sin = rope_tables(self.model, torch.cat([prompt_pos, new_pos], dim=1))  # [B, 1, P+T, d]
        valid = torch.ones(b, total, dtype=torch.bool, device=device)  # keys a query may see
        valid[:, :p] = attention_mask.bool()
        # Decode steps add this to the scores: 0 where a key is visible, -inf where it is padding.
        self._bias = torch.zeros(b, 1, 1, total, dtype=dtype, device=device).masked_fill_(
            ~valid[:, None, None, :], float("-inf"))
        shape = (b, self.num_kv_heads, total, self.head_dim)
        self._keys = [torch.empty(shape, dtype=dtype, device=device) for _ in self.layers]
        self._values = [torch.empty(shape, dtype=dtype, device=device) for _ in self.layers]
        self._length = p

        unique, inverse = torch.unique(input_ids, dim=0, return_inverse=True)  # [U, P], [B]
        # One row holding each prompt (any one: rows with equal ids have equal masks and positions).
        first = torch.empty(unique.shape[0], dtype=torch.long, device=device).scatter_(
            0, inverse, torch.arange(b, device=device))
        mask = prompt_mask(valid[first, :p])  # [U, 1, P, P]
        cos, sin = self._cos[first, :, :p], self._sin[first, :, :p]
        h = self.model.model.embed_tokens.weight[unique]  # [U, P, D]
        for layer, fused, keys, values in zip(self.layers, self.fused, self._keys, self._values):
            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       keys: torch.Tensor = keys, values: torch.Tensor = values) -> torch.Tensor:
                keys[:, :, :p] = k[inverse]
                values[:, :, :p] = v[inverse]
                return attention(q, k, v, mask)
            h = decoder_layer(self.model, layer, h, cos, sin, attend, fused)
        return next_token_logits(self.model, h[:, -1])[inverse]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row ``[B]`` and return the next-token logits ``[B, V]``."""
        start = self._length
        end = self._length = start + 1
        h = self.model.model.embed_tokens.weight[tokens[:, None]]  # [B, 1, D]
        cos, sin, bias = self._cos[:, :, start:end], self._sin[:, :, start:end], self._bias[..., :end]
        for layer, fused, keys, values in zip(self.layers, self.fused, self._keys, self._values):
            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       keys: torch.Tensor = keys, values: torch.Tensor = values) -> torch.Tensor:
                keys[:, :, start:end] = k
                values[:, :, start:end] = v
                return decode_attention(q, keys[:, :, :end], values[:, :, :end], bias)
            h = decoder_layer(self.model, layer, h, cos, sin, attend, fused)
        return next_token_logits(self.model, h[:, -1])


def decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One query per row: ``softmax(q k^T / sqrt(d) + bias) v`` ``[B, H, 1, d]``, with the
    ``H / H_kv`` query heads that share a key/value head stacked as rows of one matmul
    (grouped-query attention without repeating keys and values)."""
    b, heads, _, d = q.shape
    kv = keys.shape[1]
    grouped = q.reshape(b, kv, heads // kv, d)  # [B, H_kv, H/H_kv, d]
    scores = torch.matmul(grouped, keys.transpose(-1, -2)).mul_(d ** -0.5).add_(bias)  # [B, H_kv, H/H_kv, S]
    return torch.matmul(scores.softmax(dim=-1), values).view(b, heads, 1, d)


def completion_logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor, completion_start: int, group_size: int) -> torch.Tensor:
    """Completion logits ``[B, L, V]`` (differentiable), the contract of
    ``reasoning_rl.logprobs._shared_prompt_logits``: rows ``i*G .. i*G+G-1`` share one left-padded
    prompt ``input_ids[:, :P]``, completions ``[:, P:]`` are right-padded; the prompt's last logit
    predicts completion token 0, completion token t predicts token t + 1.

    Each distinct prompt runs once; its keys and values are repeated G times
    (``repeat_interleave``: the G copies' gradients add up in the shared prompt) and the
    completion tokens attend to them and causally to each other. Right padding needs no mask:
    a pad sits after every real token of its row, so causality hides it."""
    n, width = input_ids.shape
    p, g = completion_start, group_size
    valid = attention_mask[::g, :p].bool()  # [U, P]
    cos, sin = rope_tables(model, position_ids)  # [B, 1, W, d]
    h = model.model.embed_tokens.weight[input_ids[::g, :p]]  # [U, P, D]
    mask = prompt_mask(valid)
    prompt_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
    for layer in model.model.layers:
        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            prompt_kv.append((k.repeat_interleave(g, dim=0), v.repeat_interleave(g, dim=0)))
            return attention(q, k, v, mask)
        h = decoder_layer(model, layer, h, cos[::g, :, :p], sin[::g, :, :p], attend)
    first = next_token_logits(model, h[:, -1:]).repeat_interleave(g, dim=0)  # [B, 1, V]
    if width - p == 1:
        return first
    length = width - p - 1
    causal = torch.ones(length, length, dtype=torch.bool, device=input_ids.device).tril()
    mask = torch.cat([valid.repeat_interleave(g, dim=0)[:, None, None, :].expand(n, 1, length, p),
                      causal.expand(n, 1, length, length)], dim=-1)  # [B, 1, L-1, P+L-1]
    h = model.model.embed_tokens.weight[input_ids[:, p:-1]]  # [B, L-1, D]
    for layer, (prompt_k, prompt_v) in zip(model.model.layers, prompt_kv):
        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   prompt_k: torch.Tensor = prompt_k, prompt_v: torch.Tensor = prompt_v) -> torch.Tensor:
            return attention(q, torch.cat([prompt_k, k], dim=2), torch.cat([prompt_v, v], dim=2), mask)
        h = decoder_layer(model, layer, h, cos[:, :, p:-1], sin[:, :, p:-1], attend)
    return torch.cat([first, next_token_logits(model, h)], dim=1)
