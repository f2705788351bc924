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

- :class:`LeanDecoder` (``rollout.backend=native``, ``decoder``): prefill, then one step per new token
  against a key/value cache: a batch of whole groups (G rows per prompt) prefills and keeps each
  prompt's keys and values once, ``[U, H_kv, P, d]`` per layer, and each row's new tokens in
  ``[B, H_kv, T, d]``, preallocated and written in place; a step attends to the shared prompt
  with one matmul per group (:func:`shared_prefix_attention`) and stacks the query heads that
  share a key/value head as rows of one matmul (grouped-query attention without repeating keys).
  :meth:`LeanDecoder.extend` continues rows from keys and values kept from an earlier call (a
  multi-turn episode's previous turns: ``context_cache``), running only the rest of each context.
- :func:`completion_hidden` (``training``; the trainer's log-probs, ``reasoning_rl.policy.logprobs``, which apply the
  LM head in chunks, ``reasoning_rl.policy.lm_head``): each group's prompt once, then the completions
  against its keys and values, differentiable; when enough of the completions is right padding,
  the needed positions run as one packed sequence; with gradient checkpointing each layer is
  recomputed in the backward. :func:`completion_logits` applies the LM head to all of it.

Both equal the module forward up to float rounding: ``tests/reasoning_rl/policy/test_decode.py``
checks every decode step and the training logits and gradients against it, for Llama and
Qwen2, with left padding and grouped-query attention. Models it does not know, or features it
does not implement (sliding-window layers, per-head q/k norms, a non-SiLU MLP, adapter or
quantised layers, forward hooks, sharded parameters), are refused by
:func:`~reasoning_rl.policy.lean.support.lean_refusal`, and the runtime decision
(``model.runtime``, reasoning_rl.policy.runtime) then takes the model's own modules and says why.

The package, by job: ``support`` (what it computes exactly, and why it refuses a model),
``layers`` (RMSNorm, RoPE, one decoder layer, attention), ``decoder`` (:class:`LeanDecoder`,
sampling), ``context_cache`` (keys and values carried between sampling calls: an episode's turns),
``training`` (:func:`completion_hidden`, the training forward).
"""

from reasoning_rl.policy.lean.decoder import FUSE_MAX_PARAMETERS, LeanDecoder, group_size
from reasoning_rl.policy.lean.layers import MATMUL_ATTENTION_MAX_SCORES, attention, shared_prefix_attention
from reasoning_rl.policy.lean.support import SUPPORTED_CLASSES, lean_decoder_support, lean_refusal
from reasoning_rl.policy.lean.training import PACK_MIN_PADDING, completion_hidden, completion_logits

__all__ = [
    "FUSE_MAX_PARAMETERS",
    "MATMUL_ATTENTION_MAX_SCORES",
    "PACK_MIN_PADDING",
    "SUPPORTED_CLASSES",
    "LeanDecoder",
    "attention",
    "completion_hidden",
    "completion_logits",
    "group_size",
    "lean_decoder_support",
    "lean_refusal",
    "shared_prefix_attention",
]
