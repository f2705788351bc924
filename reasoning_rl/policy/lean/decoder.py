"""Sampling on the lean forward: :class:`LeanDecoder`, prefill then one step per new token
against a key/value cache that keeps each group's prompt once (reasoning_rl.policy.lean)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import torch.nn.functional as F

from reasoning_rl.policy.lean.layers import (
    additive_mask,
    attention,
    decoder_layer,
    head_dim,
    layer_weights,
    next_token_logits,
    prompt_mask,
    rope_tables,
    shared_prefix_attention,
)
from reasoning_rl.policy.lean.support import lean_decoder_support

FUSE_MAX_PARAMETERS = 50_000_000
"""Fuse projections up to this size: below it a decode step is bound by kernel launches and
the transient weight copy is small; above it matmuls dominate and the copy would cost memory."""


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



class LeanDecoder:
    """Prefill a left-padded batch of prompts, then one :meth:`step` per new token.

    Shapes: ``B`` rows, ``P`` prompt positions, ``T`` new tokens at most, ``H`` query heads and
    ``H_kv`` key/value heads of size ``d``. Call under ``torch.inference_mode``, and build one per ``generate`` call: with
    ``fuse`` (the default for models of at most ``FUSE_MAX_PARAMETERS`` parameters) it holds
    fused copies of the q/k/v and gate/up weights (:class:`LayerWeights`) as they were when it was built.

    The cache: each group's prompt keys and values once, ``[U, H_kv, P, d]`` per layer for the
    U = B / G groups of G equal consecutive rows (:func:`group_size`; the G rows share them:
    :func:`shared_prefix_attention`), and each row's new tokens' ``[B, H_kv, T, d]``,
    preallocated and written in place. Equal prompts that are not neighbours are cached apart.

    :meth:`extend` instead of :meth:`prefill` continues rows whose earlier context a previous
    decoder computed (:meth:`context_kv` hands it out; reasoning_rl.policy.lean.context_cache)."""

    def __init__(self, model: Any, fuse: bool | None = None, check: bool = True) -> None:
        reason = lean_decoder_support(model) if check else None  # check=False: the runtime decision did
        if reason is not None:
            raise ValueError(f"LeanDecoder cannot run this model: {reason}")
        self.model = model
        if fuse is None:
            fuse = sum(p.numel() for p in model.parameters()) <= FUSE_MAX_PARAMETERS
        self.weights = layer_weights(model, fuse)
        self.num_kv_heads = getattr(model.config, "num_key_value_heads", None) or model.config.num_attention_heads
        self.head_dim = head_dim(model.config)
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
        self._own: torch.Tensor | None = None  # [layers, 2, B, H_kv, T, d]: _keys, _values are its views
        self._prefix_valid: torch.Tensor | None = None  # [U, P]
        self._context: torch.Tensor | None = None  # [layers, 2, B, H_kv, N + M, d] after extend
        self._group = 1

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
        self._prefix_valid, self._group, self._context = valid, g, None
        self._allocate(b, max_new_tokens, dtype, device)
        self._prefix = []

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

    def extend(self, past: list[torch.Tensor | None], input_ids: torch.Tensor, attention_mask: torch.Tensor,
               max_new_tokens: int) -> torch.Tensor:
        """Continue rows whose earlier context is cached: ``past[r]`` ``[layers, 2, H_kv, n_r, d]``
        (None: nothing cached) holds the keys and values of row r's first n_r context tokens, the
        rest of the context is ``input_ids`` ``[B, M]`` (left-padded, at least one token a row).
        Runs the rest, makes room for ``max_new_tokens``, returns the next-token logits ``[B, V]``.

        The layout and why it computes what :meth:`prefill` of the whole context computes:
        reasoning_rl.policy.lean.context_cache. Positions continue each row's count: ``n_r`` +
        ``cumsum(mask) - 1``, then ``n_r + m_r + t`` for new token t."""
        b, m = input_ids.shape
        device = input_ids.device
        dtype = self.model.model.embed_tokens.weight.dtype
        lengths = torch.tensor([0 if kv is None else kv.shape[3] for kv in past], device=device)[:, None]  # [B, 1]
        n = int(lengths.max())
        context = torch.zeros((len(self.weights), 2, b, self.num_kv_heads, n + m, self.head_dim),
                              dtype=dtype, device=device)  # [layers, 2, B, H_kv, N + M, d]
        for r, kv in enumerate(past):  # each row's cache at the end of the first block: left padding
            if kv is not None and kv.shape[3]:
                context[:, :, r, :, n - kv.shape[3]:n] = kv
        cached = torch.arange(n, device=device) >= n - lengths  # [B, N]
        fresh = attention_mask.bool()  # [B, M]
        new_pos = lengths + (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [B, M]
        step_pos = lengths + attention_mask.sum(-1, keepdim=True) + torch.arange(max_new_tokens, device=device)
        cos, sin = rope_tables(self.model, torch.cat([new_pos, step_pos], dim=1))  # [B, 1, M + T, d]
        self._cos, self._sin = cos[:, :, m:], sin[:, :, m:]  # [B, 1, T, d]
        valid = torch.cat([cached, fresh], dim=1)  # [B, N + M]
        self._prefix_valid, self._group, self._context = valid, 1, context
        self._prefix_bias = additive_mask(valid[:, None, None, :], dtype)  # [B, 1, 1, N + M]
        self._allocate(b, max_new_tokens, dtype, device)
        self._prefix = [(context[i, 0], context[i, 1]) for i in range(len(self.weights))]

        # The new block's queries see the row's cached keys and, causally, the new ones.
        mask = additive_mask(torch.cat([cached[:, None, None, :].expand(b, 1, m, n), prompt_mask(fresh)], dim=-1),
                             dtype)  # [B, 1, M, N + M]
        h = F.embedding(input_ids, self.model.model.embed_tokens.weight)  # [B, M, D]
        cos, sin = cos[:, :, :m], sin[:, :, :m]  # [B, 1, M, d]
        last = len(self.weights) - 1
        for i, (w, (keys, values)) in enumerate(zip(self.weights, self._prefix)):
            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor = keys,
                       values: torch.Tensor = values) -> torch.Tensor:
                keys[:, :, n:], values[:, :, n:] = k, v
                return attention(q, keys, values, mask[:, :, -q.shape[2]:])
            h = decoder_layer(w, h, cos, sin, attend, last_only=i == last)
        return next_token_logits(self.model, h[:, -1])

    def context_kv(self, row: int, kept: int) -> torch.Tensor:
        """Keys and values ``[layers, 2, H_kv, n, d]`` of row ``row``'s context (the tokens of the
        last :meth:`prefill` or :meth:`extend`, padding dropped) and its first ``kept`` new tokens
        (at most the :meth:`step` calls made since), in order: what a later :meth:`extend` takes."""
        if kept > self._length:
            raise ValueError(f"row {row}: {kept} new tokens asked for, {self._length} were run")
        if self._context is None:  # after prefill: each group's prompt once, per layer
            self._context = torch.stack([torch.stack(kv) for kv in self._prefix])  # [layers, 2, U, H_kv, P, d]
        u = row // self._group
        where = self._prefix_valid[u].nonzero().squeeze(1)  # [n]
        return torch.cat([self._context[:, :, u].index_select(3, where), self._own[:, :, row, :, :kept]], dim=3)

    def _allocate(self, b: int, max_new_tokens: int, dtype: torch.dtype, device: torch.device) -> None:
        """The rows' new-token keys and values, ``[B, H_kv, T, d]`` per layer (views of one tensor)."""
        self._own = torch.empty((len(self.weights), 2, b, self.num_kv_heads, max_new_tokens, self.head_dim),
                                dtype=dtype, device=device)
        self._keys = [self._own[i, 0] for i in range(len(self.weights))]
        self._values = [self._own[i, 1] for i in range(len(self.weights))]
        self._length = 0

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

