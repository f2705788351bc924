"""A lean decode step for Llama-family decoders, read straight from the model's own parameters.

For a small model on a CPU, one token of ``generate`` (or of a plain loop over the model's
``forward``) costs far more in the transformers module stack than in arithmetic: cache
objects, mask builders, per-layer keyword plumbing, three projections where one matmul would
do. :class:`LeanDecoder` computes what ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` compute, with
the same parameters, in a handful of tensor ops per layer:

    h_0 = E[x]
    per layer:  a = RMSNorm(h)
                [q | k | v] = a [W_q | W_k | W_v]^T (+ [b_q | b_k | b_v])    one fused matmul
                q, k = RoPE(q, pos), RoPE(k, pos)                              the model's cos/sin
                h = h + softmax(q k^T / sqrt(d) + mask) v W_o^T                cached k, v
                b = RMSNorm(h);  [g | u] = b [W_gate | W_up]^T                 one fused matmul
                h = h + (silu(g) * u) W_down^T
    logits = RMSNorm(h) W_lm^T                                                 last position only

Every new token runs one step against a key/value cache preallocated at ``[B, H_kv, P + T, d]``
per layer (written in place, never concatenated); RoPE's cos/sin are computed once for every
position by the model's own rotary module (so any ``rope_type`` it supports is honoured), and
the rotation is ``x cos + roll(x, d/2) sin_signed`` (``rotate_half`` without its two slices and
a concatenation; exact, the sign flip is exact). The fused weights are concatenated once per
:class:`LeanDecoder`, i.e. once per ``generate`` call, so they follow the optimiser; they are
transient copies (the model's parameters are not touched).

The result equals the module forward up to float rounding (a fused matmul sums in another
order): ``tests/reasoning_rl/test_decode.py`` checks the logits of every step against a full
forward, for Llama and Qwen2, with left padding and grouped-query attention. Architectures it
does not know (or features it does not implement: sliding-window layers, per-head q/k norms, a
non-SiLU MLP) are refused by :func:`lean_decoder_support`, and the native engine falls back
to the module loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

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


@dataclass
class _Layer:
    """One decoder layer's weights, projections fused."""

    norm_attn: torch.Tensor
    eps_attn: float
    w_qkv: torch.Tensor
    b_qkv: torch.Tensor | None
    w_o: torch.Tensor
    b_o: torch.Tensor | None
    norm_mlp: torch.Tensor
    eps_mlp: float
    w_gate_up: torch.Tensor
    b_gate_up: torch.Tensor | None
    w_down: torch.Tensor
    b_down: torch.Tensor | None


def _fused(*linears: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    weight = torch.cat([m.weight for m in linears], dim=0)
    biases = [m.bias for m in linears]
    if all(b is None for b in biases):
        return weight, None
    bias = torch.cat([b if b is not None else weight.new_zeros(m.weight.shape[0]) for m, b in zip(linears, biases)])
    return weight, bias


class LeanDecoder:
    """Prefill a left-padded batch of prompts, then one :meth:`step` per new token.

    Shapes: ``B`` rows, ``P`` prompt positions, ``T`` new tokens at most, ``H`` query heads and
    ``H_kv`` key/value heads of size ``d``. Call under ``torch.inference_mode``."""

    def __init__(self, model: Any) -> None:
        reason = lean_decoder_support(model)
        if reason is not None:
            raise ValueError(f"LeanDecoder cannot run this model: {reason}")
        cfg = model.config
        inner = model.model
        self.model = model
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.head_dim ** -0.5
        self.embed = inner.embed_tokens.weight
        self.final_norm, self.final_eps = inner.norm.weight, inner.norm.variance_epsilon
        self.lm_head = model.lm_head.weight
        self.lm_bias = getattr(model.lm_head, "bias", None)
        self.layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            w_qkv, b_qkv = _fused(attn.q_proj, attn.k_proj, attn.v_proj)
            w_gu, b_gu = _fused(mlp.gate_proj, mlp.up_proj)
            self.layers.append(_Layer(
                norm_attn=layer.input_layernorm.weight, eps_attn=layer.input_layernorm.variance_epsilon,
                w_qkv=w_qkv, b_qkv=b_qkv, w_o=attn.o_proj.weight, b_o=attn.o_proj.bias,
                norm_mlp=layer.post_attention_layernorm.weight,
                eps_mlp=layer.post_attention_layernorm.variance_epsilon,
                w_gate_up=w_gu, b_gate_up=b_gu, w_down=mlp.down_proj.weight, b_down=mlp.down_proj.bias,
            ))
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Run the prompts ``[B, P]`` (left-padded; ``attention_mask`` 1 on real tokens), make room
        for ``max_new_tokens``, and return the next-token logits ``[B, V]``.

        Positions count from each row's first real token (``cumsum(mask) - 1``, as ``generate``
        does); new token t of a row sits at position ``n_real + t``. Rows holding the same prompt
        (a group's G samples) are run once and their keys and values copied: causal attention
        makes a prompt's cache independent of what follows it."""
        b, p = input_ids.shape
        total = p + max_new_tokens
        device, dtype = input_ids.device, self.embed.dtype
        prompt_pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [B, P]
        new_pos = attention_mask.sum(-1, keepdim=True) + torch.arange(max_new_tokens, device=device)  # [B, T]
        positions = torch.cat([prompt_pos, new_pos], dim=1)  # [B, P+T]
        cos, sin = self.model.model.rotary_emb(self.embed[:1], positions)  # [B, P+T, d] each
        half = self.head_dim // 2
        self._cos = cos.unsqueeze(1)  # [B, 1, P+T, d]: broadcast over heads
        self._sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1).unsqueeze(1)
        valid = torch.ones(b, 1, 1, total, dtype=torch.bool, device=device)  # keys a query may see
        valid[:, 0, 0, :p] = attention_mask.bool()
        # Decode steps add this to the scores: 0 where a key is visible, -inf where it is padding.
        self._bias = torch.zeros(b, 1, 1, total, dtype=dtype, device=device).masked_fill_(~valid, float("-inf"))
        shape = (b, self.num_kv_heads, total, self.head_dim)
        self._keys = [torch.empty(shape, dtype=dtype, device=device) for _ in self.layers]
        self._values = [torch.empty(shape, dtype=dtype, device=device) for _ in self.layers]
        self._length = p

        unique, inverse = torch.unique(input_ids, dim=0, return_inverse=True)  # [U, P], [B]
        u = unique.shape[0]
        # One row holding each prompt (any one: rows with equal ids have equal masks and positions).
        first = torch.empty(u, dtype=torch.long, device=device).scatter_(0, inverse, torch.arange(b, device=device))
        keys = [torch.empty(u, self.num_kv_heads, p, self.head_dim, dtype=dtype, device=device) for _ in self.layers]
        values = [torch.empty_like(k) for k in keys]
        # Causal within the prompt, padding keys hidden; a padding query may see itself, so no
        # softmax row is empty (its output is never attended to: its key is hidden).
        causal = torch.ones(p, p, dtype=torch.bool, device=device).tril()
        mask = (causal & valid[first, :, :, :p]) | torch.eye(p, dtype=torch.bool, device=device)  # [U, 1, P, P]
        h = self.embed[unique]  # [U, P, D]
        cos_p, sin_p = self._cos[first, :, :p], self._sin[first, :, :p]
        for layer, k_cache, v_cache in zip(self.layers, keys, values):
            h = self._layer(layer, h, cos_p, sin_p, k_cache, v_cache, 0, p, mask)
        for k_cache, v_cache, k_all, v_all in zip(keys, values, self._keys, self._values):
            k_all[:, :, :p] = k_cache[inverse]
            v_all[:, :, :p] = v_cache[inverse]
        return self._logits(h)[inverse]

    def release(self) -> None:
        """Free the key/value cache (the fused weights stay for the next prefill)."""
        self._keys, self._values = [], []
        self._cos = self._sin = self._bias = None

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row ``[B]`` and return the next-token logits ``[B, V]``."""
        start = self._length
        end = self._length = start + 1
        h = self.embed[tokens[:, None]]  # [B, 1, D]
        cos, sin, bias = self._cos[:, :, start:end], self._sin[:, :, start:end], self._bias[..., :end]
        for layer, keys, values in zip(self.layers, self._keys, self._values):
            h = self._layer(layer, h, cos, sin, keys, values, start, end, bias)
        return self._logits(h)

    def _layer(self, layer: _Layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
               values: torch.Tensor, start: int, end: int, mask: torch.Tensor) -> torch.Tensor:
        """Positions ``start .. end`` of hidden states ``h`` ``[B, L, D]`` through one decoder layer;
        their keys and values are written into the layer's cache first."""
        b, length, _ = h.shape
        heads, kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        a = rms_norm(h, layer.norm_attn, layer.eps_attn)
        qkv = F.linear(a, layer.w_qkv, layer.b_qkv).view(b, length, heads + 2 * kv, d).transpose(1, 2)
        qk = rotate(qkv[:, :heads + kv], cos, sin)  # [B, H + H_kv, L, d]
        keys[:, :, start:end] = qk[:, heads:]
        values[:, :, start:end] = qkv[:, heads + kv:]
        if length == 1:
            att = self._decode_attention(qk[:, :heads], keys[:, :, :end], values[:, :, :end], mask)
        else:
            att = F.scaled_dot_product_attention(qk[:, :heads], keys[:, :, :end], values[:, :, :end],
                                                 attn_mask=mask, scale=self.scale, enable_gqa=heads != kv)
        h = h + F.linear(att.transpose(1, 2).reshape(b, length, heads * d), layer.w_o, layer.b_o)
        gate, up = F.linear(rms_norm(h, layer.norm_mlp, layer.eps_mlp), layer.w_gate_up, layer.b_gate_up).chunk(2, -1)
        return h + F.linear(F.silu(gate) * up, layer.w_down, layer.b_down)

    def _decode_attention(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                          bias: torch.Tensor) -> torch.Tensor:
        """One query per row: ``softmax(q k^T / sqrt(d) + bias) v`` ``[B, H, 1, d]``, with the
        ``H / H_kv`` query heads that share a key/value head stacked as rows of one matmul
        (grouped-query attention without repeating keys and values)."""
        b, heads, _, d = q.shape
        kv = keys.shape[1]
        grouped = q.reshape(b, kv, heads // kv, d)  # [B, H_kv, H/H_kv, d]
        scores = torch.matmul(grouped, keys.transpose(-1, -2)).mul_(self.scale).add_(bias)  # [B, H_kv, H/H_kv, S]
        return torch.matmul(scores.softmax(dim=-1), values).view(b, heads, 1, d)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``[B, V]`` of the last position only."""
        return F.linear(rms_norm(h[:, -1], self.final_norm, self.final_eps), self.lm_head, self.lm_bias)
