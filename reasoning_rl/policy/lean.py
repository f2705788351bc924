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
model's rotary module, so every ``rope_type`` it supports is honoured; attention is two matmuls
and a softmax against an additive mask built once per forward (:func:`attention`). When decoding
a model of at most ``FUSE_MAX_PARAMETERS`` parameters, q/k/v and gate/up are one matmul each
(:class:`LayerWeights` with ``fuse``). A prompt's last layer computes keys and values for every position
but the rest of the layer only for the last one (``decoder_layer(..., last_only=True)``).

Two users:

- :class:`LeanDecoder` (``rollout.backend=native``): prefill, then one step per new token
  against a key/value cache: a batch of whole groups (G rows per prompt) prefills and keeps each
  prompt's keys and values once, ``[U, H_kv, P, d]`` per layer, and each row's new tokens in
  ``[B, H_kv, T, d]``, preallocated and written in place; a step attends to the shared prompt
  with one matmul per group (:func:`shared_prefix_attention`) and stacks the query heads that
  share a key/value head as rows of one matmul (grouped-query attention without repeating keys).
- :func:`completion_hidden` (the trainer's log-probs, ``reasoning_rl.policy.logprobs``, which apply the
  LM head in chunks, ``reasoning_rl.policy.lm_head``): each group's prompt once, then the completions
  against its keys and values, differentiable; when enough of the completions is right padding,
  the needed positions run as one packed sequence; with gradient checkpointing each layer is
  recomputed in the backward. :func:`completion_logits` applies the LM head to all of it.

Both equal the module forward up to float rounding: ``tests/reasoning_rl/test_decode.py``
checks every decode step and the training logits and gradients against it, for Llama and
Qwen2, with left padding and grouped-query attention. Models it does not know, or features it
does not implement (sliding-window layers, per-head q/k norms, a non-SiLU MLP, adapter or
quantised layers, forward hooks, sharded parameters), are refused by
:func:`lean_decoder_support`, and callers then run the model's own modules.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

FUSE_MAX_PARAMETERS = 50_000_000
"""Fuse projections up to this size: below it a decode step is bound by kernel launches and
the transient weight copy is small; above it matmuls dominate and the copy would cost memory."""

PACK_MIN_PADDING = 0.15
"""The training forward drops right padding (runs the needed completion positions as one
packed sequence) when at least this fraction of the completion positions is padding. Packing
costs a gather and a scatter per layer: on the 1M-parameter benchmark model it breaks even at
about 10% padding and is 30% faster at 47% (docs/performance.md)."""

MATMUL_ATTENTION_MAX_SCORES = 1024
"""Up to this many scores per head (queries x keys), :func:`attention` computes them with two
matmuls on a CPU. Measured, one thread, forward + backward, B 32, 4 heads: 15 x 40 scores
1.04 ms against 1.42 ms for ``scaled_dot_product_attention``; 32 x 64: 4.3 against 4.0 ms;
128 x 160 (B 16): 17.5 against 12.3 ms."""

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
    if model.training and getattr(cfg, "attention_dropout", 0.0):
        return f"attention_dropout={cfg.attention_dropout} in training mode (the lean forward has no dropout)"
    # Gradient checkpointing's hook that makes the input embeddings require grad (for frozen
    # embeddings under reentrant checkpointing) changes no value; the lean forward may skip it.
    harmless = {h.id for h in getattr(model, "_require_grads_hooks", None) or []}
    for name, module in model.named_modules(remove_duplicate=False):  # one walk: hooks and parameters
        if set(module._forward_hooks) - harmless or module._forward_pre_hooks:
            return f"forward hooks on {name or 'the model'} (they would be skipped)"
        if any(p is not None and type(p) is not torch.nn.Parameter for p in module._parameters.values()):
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


Linear = tuple[torch.Tensor, torch.Tensor | None]
"""A projection's (weight, bias), the arguments of ``F.linear``."""


class LayerWeights:
    """One decoder layer's tensors and sizes, read once from its modules: the parameters
    themselves (no copies), so gradients reach them and in-place optimiser updates are seen.
    Reading them per call through ``nn.Module`` attribute lookups and the model config cost
    ~14 us a layer, i.e. ~1 ms per generated sequence batch.

    ``fuse``: also one layer's q/k/v and gate/up weights concatenated, so each group is one
    matmul: fewer kernel launches where launches cost more than arithmetic (a small model's
    decode step). A copy, taken under ``torch.inference_mode`` for one ``generate`` call."""

    __slots__ = (
        "down",
        "gate",
        "gate_up",
        "head_dim",
        "heads",
        "k",
        "norm_in",
        "norm_post",
        "o",
        "q",
        "qkv",
        "up",
        "v",
    )

    def __init__(self, layer: Any, config: Any, fuse: bool = False) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.heads, self.head_dim = config.num_attention_heads, _head_dim(config)
        self.norm_in = layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon
        self.norm_post = layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon
        self.q, self.k, self.v, self.o = ((m.weight, m.bias) for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj))
        self.gate, self.up, self.down = ((m.weight, m.bias) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        self.qkv = _concat(attn.q_proj, attn.k_proj, attn.v_proj) if fuse else None
        self.gate_up = _concat(mlp.gate_proj, mlp.up_proj) if fuse else None


def layer_weights(model: Any, fuse: bool = False) -> list[LayerWeights]:
    """:class:`LayerWeights` of every decoder layer of ``model``."""
    return [LayerWeights(layer, model.config, fuse) for layer in model.model.layers]


def _concat(*linears: Any) -> Linear:
    weight = torch.cat([m.weight for m in linears])
    if all(m.bias is None for m in linears):
        return weight, None
    return weight, torch.cat([m.bias if m.bias is not None else weight.new_zeros(m.out_features) for m in linears])


def decoder_layer(w: LayerWeights, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  attend: Attend, last_only: bool = False) -> torch.Tensor:
    """Hidden states ``h`` ``[B, L, D]`` through one decoder layer; ``attend`` decides which keys
    and values the new positions see (a cache, a shared prompt's, their own).

    ``last_only``: keys and values of all L positions still reach ``attend``, but only the last
    position queries them and goes on through ``W_o`` and the MLP; returns ``[B, 1, D]``. Exact
    for a model's last layer when only the last position's output is read (a prompt whose keys
    and values are cached and whose last logit predicts the first new token): every other
    position's output there feeds nothing, so dropping it changes no logit and no gradient."""
    b, length, _ = h.shape
    heads, d = w.heads, w.head_dim
    a = rms_norm(h, *w.norm_in)
    if w.qkv is not None:  # one matmul, and one rotation of q and k together
        qkv = F.linear(a, *w.qkv).view(b, length, -1, d).transpose(1, 2)  # [B, H + 2 H_kv, L, d]
        kv = (qkv.shape[1] - heads) // 2
        qk = rotate(qkv[:, :heads + kv], cos, sin)
        q, k, v = qk[:, :heads], qk[:, heads:], qkv[:, heads + kv:]
    else:
        q, k, v = (F.linear(a, *proj).view(b, length, -1, d).transpose(1, 2) for proj in (w.q, w.k, w.v))  # [B, heads, L, d]
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    if last_only:
        q, h, length = q[:, :, -1:], h[:, -1:], 1
    att = attend(q, k, v)  # [B, H, L, d]
    h = h + F.linear(att.transpose(1, 2).reshape(b, length, heads * d), *w.o)
    m = rms_norm(h, *w.norm_post)
    if w.gate_up is not None:
        gate, up = F.linear(m, *w.gate_up).chunk(2, dim=-1)
    else:
        gate, up = F.linear(m, *w.gate), F.linear(m, *w.up)
    return h + F.linear(F.silu(gate) * up, *w.down)


def final_norm(model: Any, h: torch.Tensor) -> torch.Tensor:
    """``RMSNorm(h)`` with the model's final norm: what the LM head reads.  # [..., D]"""
    norm = model.model.norm
    return rms_norm(h, norm.weight, norm.variance_epsilon)


def next_token_logits(model: Any, h: torch.Tensor) -> torch.Tensor:
    """``RMSNorm(h) W_lm^T``: logits ``[..., V]`` of hidden states ``[..., D]``."""
    return F.linear(final_norm(model, h), model.lm_head.weight, model.lm_head.bias)


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask (True = visible) as the bias :func:`attention` adds to the scores: 0 where
    a key is visible, -inf where it is hidden. Built once per forward, shared by every layer."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d) + bias) v`` ``[B, H, L, d]`` over all heads, for ``bias``
    ``[B, 1, L, S]`` from :func:`additive_mask` (every row must see at least one key).

    On a CPU, for one query per row (a decode step) or at most ``MATMUL_ATTENTION_MAX_SCORES``
    scores per head: two matmuls and a softmax, with the ``H / H_kv`` query heads that share a
    key/value head stacked as rows (grouped-query attention without repeating keys and values);
    at these sizes it is faster, forward and backward, than ``scaled_dot_product_attention``,
    whose blocking pays off for longer sequences. Otherwise (and on accelerators)
    ``scaled_dot_product_attention``, which also keeps the ``[L, S]`` scores out of memory."""
    b, heads, length, d = q.shape
    kv, keys = k.shape[1], k.shape[2]
    if q.device.type != "cpu" or (length > 1 and length * keys > MATMUL_ATTENTION_MAX_SCORES):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=d ** -0.5, enable_gqa=kv != heads)
    rep = heads // kv
    grouped = q.reshape(b, kv, rep * length, d)  # rows: query head r of each key/value head, then position
    rows_bias = bias if rep == 1 or length == 1 else bias.repeat(1, 1, rep, 1)  # [B, 1, rep*L, S]
    scores = torch.matmul(grouped, k.transpose(-1, -2)) * d ** -0.5 + rows_bias
    return torch.matmul(scores.softmax(dim=-1), v).view(b, heads, length, d)


def shared_prefix_attention(q: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor,
                            prefix_bias: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """:func:`attention` of rows that share a prefix, without copying the prefix to each row:
    ``softmax([q K_u^T, q K^T] / sqrt(d) + [bias_u, 0]) [V_u; V]`` ``[B, H, L, d]``.

    Rows ``i*G .. i*G+G-1`` (a group's G samples) share prefix ``u = i``: its keys and values
    ``prefix_k``, ``prefix_v`` ``[U, H_kv, P, d]`` (B = U G) and ``prefix_bias`` ``[U, 1, 1, P]``
    (its padding, from :func:`additive_mask`); ``k``, ``v`` ``[B, H_kv, S, d]`` are each row's
    own keys, all visible (a decode step's earlier tokens). The G rows' queries of one prefix
    are one matmul with its keys (``[G H/H_kv L, d] x [d, P]`` per key/value head) instead of G
    matrix-vector products with G copies: a decode step reads each prompt's cache once instead
    of G times (Hydragen, Juravsky et al. 2024, splits attention over a shared prefix the same
    way). Measured: 4-8% off a generate call of the benchmark workload (docs/performance.md)."""
    b, heads, length, d = q.shape
    u, kv, p, _ = prefix_k.shape
    g, rows = b // u, heads // kv * length  # rows per key/value head and sequence
    q = q.reshape(b, kv, rows, d)
    q_prefix = q.view(u, g, kv, rows, d).transpose(1, 2).reshape(u, kv, g * rows, d)
    prefix = torch.matmul(q_prefix, prefix_k.transpose(-1, -2)) * d ** -0.5 + prefix_bias  # [U, kv, G rows, P]
    own = torch.matmul(q, k.transpose(-1, -2)) * d ** -0.5  # [B, kv, rows, S]
    prefix = prefix.view(u, kv, g, rows, p).transpose(1, 2).reshape(b, kv, rows, p)
    probs = torch.cat([prefix, own], dim=-1).softmax(dim=-1)  # [B, kv, rows, P + S]
    p_prefix = probs[..., :p].reshape(u, g, kv, rows, p).transpose(1, 2).reshape(u, kv, g * rows, p)
    out = torch.matmul(p_prefix, prefix_v).view(u, kv, g, rows, d).transpose(1, 2).reshape(b, kv, rows, d)
    return (out + torch.matmul(probs[..., p:], v)).reshape(b, heads, length, d)  # a copy when U = 1


def group_size(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """The largest G such that rows ``i*G .. i*G+G-1`` of a batch hold the same prompt for every
    i: the greatest common divisor of the lengths of its runs of equal consecutive rows (ids and
    mask). A batch of whole groups of n samples gives n (or a divisor of it when a prompt
    appears in two neighbouring groups); 1 when no two neighbouring rows agree."""
    b = input_ids.shape[0]
    same = (input_ids[1:] == input_ids[:-1]).all(-1) & (attention_mask[1:] == attention_mask[:-1]).all(-1)
    starts = (~same).nonzero().squeeze(1) + 1  # [runs - 1]: the rows where a new prompt begins
    bounds = [0, *starts.tolist(), b]
    return math.gcd(*(end - start for start, end in itertools.pairwise(bounds)))


def _head_dim(cfg: Any) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


class LeanDecoder:
    """Prefill a left-padded batch of prompts, then one :meth:`step` per new token.

    Shapes: ``B`` rows, ``P`` prompt positions, ``T`` new tokens at most, ``H`` query heads and
    ``H_kv`` key/value heads of size ``d``. Call under ``torch.inference_mode``, and build one per ``generate`` call: with
    ``fuse`` (the default for models of at most ``FUSE_MAX_PARAMETERS`` parameters) it holds
    fused copies of the q/k/v and gate/up weights (:class:`LayerWeights`) as they were when it was built.

    The cache: each group's prompt keys and values once, ``[U, H_kv, P, d]`` per layer for the
    U = B / G groups of G equal consecutive rows (:func:`group_size`; the G rows share them:
    :func:`shared_prefix_attention`), and each row's new tokens' ``[B, H_kv, T, d]``,
    preallocated and written in place. Equal prompts that are not neighbours are cached apart."""

    def __init__(self, model: Any, fuse: bool | None = None) -> None:
        reason = lean_decoder_support(model)
        if reason is not None:
            raise ValueError(f"LeanDecoder cannot run this model: {reason}")
        self.model = model
        if fuse is None:
            fuse = sum(p.numel() for p in model.parameters()) <= FUSE_MAX_PARAMETERS
        self.weights = layer_weights(model, fuse)
        self.num_kv_heads = getattr(model.config, "num_key_value_heads", None) or model.config.num_attention_heads
        self.head_dim = _head_dim(model.config)
        self.release()

    @property
    def prompts_cached(self) -> int:
        """U: how many prompt caches the last :meth:`prefill` keeps (B / G)."""
        return self._prefix[0][0].shape[0] if self._prefix else 0

    def release(self) -> None:
        """Free the key/value cache."""
        self._prefix: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._cos = self._sin = self._prefix_bias = None
        self._length = 0

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Run the prompts ``[B, P]`` (left-padded; ``attention_mask`` 1 on real tokens), make room
        for ``max_new_tokens``, and return the next-token logits ``[B, V]``.

        Positions count from each row's first real token (``cumsum(mask) - 1``, as ``generate``
        does); new token t of a row sits at position ``n_real + t``. When the batch is whole
        groups of G rows holding the same prompt (:func:`group_size`), each prompt runs once and
        its keys and values are kept once: causal attention makes a prompt's cache independent
        of what follows it."""
        b, p = input_ids.shape
        device = input_ids.device
        dtype = self.model.model.embed_tokens.weight.dtype
        g = group_size(input_ids, attention_mask)
        prompt_pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [B, P]
        new_pos = attention_mask.sum(-1, keepdim=True) + torch.arange(max_new_tokens, device=device)  # [B, T]
        # One call for every position (prompt and new), as the training forward makes it: rotary
        # variants that scale with the longest position (dynamic, longrope) see the same length.
        cos, sin = rope_tables(self.model, torch.cat([prompt_pos, new_pos], dim=1))  # [B, 1, P+T, d]
        self._cos, self._sin = cos[:, :, p:], sin[:, :, p:]  # [B, 1, T, d]
        valid = attention_mask[::g].bool()  # [U, P]
        # Decode steps add this to the prompt's scores: 0 where a key is visible, -inf on padding.
        self._prefix_bias = additive_mask(valid[:, None, None, :], dtype)  # [U, 1, 1, P]
        shape = (b, self.num_kv_heads, max_new_tokens, self.head_dim)
        self._keys = [torch.empty(shape, dtype=dtype, device=device) for _ in self.weights]
        self._values = [torch.empty(shape, dtype=dtype, device=device) for _ in self.weights]
        self._prefix, self._length = [], 0

        mask = additive_mask(prompt_mask(valid), dtype)  # [U, 1, P, P]
        cos, sin = cos[::g, :, :p], sin[::g, :, :p]  # [U, 1, P, d]
        h = F.embedding(input_ids[::g], self.model.model.embed_tokens.weight)  # [U, P, D]
        last = len(self.weights) - 1
        for i, w in enumerate(self.weights):
            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                self._prefix.append((k.contiguous(), v.contiguous()))  # [U, H_kv, P, d]
                return attention(q, k, v, mask[:, :, -q.shape[2]:])
            # Only the last position's output of the last layer is read (its logit predicts token 0).
            h = decoder_layer(w, h, cos, sin, attend, last_only=i == last)
        return next_token_logits(self.model, h[:, -1]).repeat_interleave(g, dim=0)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row ``[B]`` and return the next-token logits ``[B, V]``."""
        t = self._length
        self._length = t + 1
        h = F.embedding(tokens[:, None], self.model.model.embed_tokens.weight)  # [B, 1, D]
        cos, sin = self._cos[:, :, t:t + 1], self._sin[:, :, t:t + 1]
        for w, keys, values, (prefix_k, prefix_v) in zip(self.weights, self._keys, self._values, self._prefix):
            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor = keys,
                       values: torch.Tensor = values, prefix_k: torch.Tensor = prefix_k,
                       prefix_v: torch.Tensor = prefix_v) -> torch.Tensor:
                keys[:, :, t:t + 1] = k
                values[:, :, t:t + 1] = v
                return shared_prefix_attention(q, prefix_k, prefix_v, self._prefix_bias, keys[:, :, :t + 1],
                                               values[:, :, :t + 1])
            h = decoder_layer(w, h, cos, sin, attend)
        return next_token_logits(self.model, h[:, -1])


def completion_logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor, completion_start: int, group_size: int,
                      checkpoint: bool = False) -> torch.Tensor:
    """Completion logits ``[B, L, V]`` (differentiable): ``W_lm`` applied to
    :func:`completion_hidden` (same arguments), the contract of
    ``reasoning_rl.policy.logprobs._shared_prompt_logits``. The training log-probs apply the LM head
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
