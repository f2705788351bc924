"""The lean forward's building blocks: RMSNorm, RoPE, one decoder layer, attention
(reasoning_rl.policy.lean; the package docstring has the equations)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

MATMUL_ATTENTION_MAX_SCORES = 1024
"""Up to this many scores per head (queries x keys), :func:`attention` computes them with two
matmuls on a CPU. Measured, one thread, forward + backward, B 32, 4 heads: 15 x 40 scores
1.04 ms against 1.42 ms for ``scaled_dot_product_attention``; 32 x 64: 4.3 against 4.0 ms;
128 x 160 (B 16): 17.5 against 12.3 ms."""


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
        self.heads, self.head_dim = config.num_attention_heads, head_dim(config)
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



def head_dim(cfg: Any) -> int:
    """Size of one attention head (``head_dim``, else hidden size / heads)."""
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads

