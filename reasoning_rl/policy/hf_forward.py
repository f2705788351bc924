"""transformers' modules forward for the training log-probs (the hf runtime): each group's prompt
run once, and the completion hidden states that let the chunked LM head apply.

The lean runtime (reasoning_rl.policy.lean) hands the chunked LM head (reasoning_rl.policy.lm_head) its
last hidden states. Models it does not run (a peft/LoRA policy, a family it does not implement,
another device) used to compute full ``[B, L, V]`` logits: at Qwen2.5's 151,936-token vocabulary
that is the largest tensor of a training step. For the causal-LM classes whose forward is

    h = self.model(...).last_hidden_state        (after the final norm)
    logits = self.lm_head(h)                      (no scaling or soft-capping after it)

:func:`completion_hidden` runs ``self.model`` (the decoder, :meth:`get_decoder`) with transformers'
modules, adapters, hooks and gradient checkpointing as they are, and the LM head is then applied a
chunk of positions at a time with the same formula. :func:`chunked_head_refusal` names why a model
does not qualify; the run's start-up check (reasoning_rl.policy.runtime_check) compares the result
with the module's own logits and stops the run when they differ.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

HEAD_CLASSES = (
    "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "MixtralForCausalLM",
    "Phi3ForCausalLM", "GemmaForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Olmo2ForCausalLM",
    "SmolLM3ForCausalLM",
)
"""Causal-LM classes whose logits are ``lm_head(decoder(...).last_hidden_state)`` with nothing after
(read in transformers 5.25's modeling files). Gemma2/3 soft-cap their logits, Cohere and Granite scale
them: not listed, so they keep full logits."""

SCALED_LOGITS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
"""Config fields that, when set, mean the logits are transformed after the LM head."""


def unwrap_peft(model: Any) -> Any:
    """The transformers model inside a peft wrapper (adapter layers injected in place), else ``model``."""
    return model.get_base_model() if hasattr(model, "get_base_model") and hasattr(model, "peft_config") else model


def chunked_head_refusal(model: Any) -> str | None:
    """None when the chunked LM head computes exactly what ``model``'s forward computes from the
    decoder's hidden states (module docstring); otherwise the reason it does not, in words."""
    base = unwrap_peft(model)
    name = type(base).__name__
    if name not in HEAD_CLASSES:
        return f"{name} is not one of the classes whose logits are lm_head(hidden) ({', '.join(HEAD_CLASSES)})"
    cfg = base.config.get_text_config()
    for key in SCALED_LOGITS:
        if getattr(cfg, key, None) is not None:
            return f"config.{key} is set (the logits are transformed after the LM head)"
    head = base.get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        return f"the LM head is a {type(head).__name__}, not a plain nn.Linear (an adapter or quantised layer)"
    if any(type(p) is not torch.nn.Parameter for p in head.parameters()):
        return "the LM head's parameters are not plain tensors (sharded or wrapped: FSDP)"
    harmless = {h.id for h in getattr(base, "_require_grads_hooks", None) or []}
    for module in (model, base, head):  # hooks on the decoder itself still run: it is called as a module
        if set(module._forward_hooks) - harmless or module._forward_pre_hooks:
            return f"forward hooks on {type(module).__name__} (they would be skipped)"
    return None


def lm_head_of(model: Any) -> torch.nn.Linear:
    """The plain ``nn.Linear`` LM head of ``model`` (peft unwrapped)."""
    return unwrap_peft(model).get_output_embeddings()


def cache_argument(model: Any) -> str:
    """transformers >= 5.2x takes the key/value cache as ``cache``; earlier versions as ``past_key_values``."""
    model = unwrap_peft(model)  # peft passes **kwargs to the base
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def shared_prompt_forward(module: Any, output: str, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                          position_ids: torch.Tensor, completion_start: int, group_size: int) -> torch.Tensor:
    """``module``'s ``output`` (``logits`` of a causal LM ``[B, L, V]``, or ``last_hidden_state`` of its
    decoder ``[B, L, D]``) at the positions that predict the completion tokens, each group's prompt
    encoded once.

    A GRPO group is G completions of one prompt, and the prompt's keys and values do
    not depend on the completion (causal attention). So: run the B/G distinct prompts,
    keep their key/value cache, repeat it G times along the batch (``repeat_interleave``
    is differentiable: the gradients of the G copies add up in the shared prompt), and
    run only the completion tokens against it. The prompt's last position predicts the
    first completion token; completion token t predicts token t + 1. When prompts are
    long and answers short (the arithmetic task: ~25 prompt tokens, ~3 answer tokens),
    this removes most of the forward and backward compute. ``position_ids`` are the full
    rows' positions: their prompt slice depends on the prompt alone, so it is the same
    for every row of a group. Rows ``i*G .. i*G+G-1`` must share one prompt (checked by the caller).
    """
    width, p = input_ids.shape[1], completion_start
    prompt_ids, prompt_mask = input_ids[::group_size, :p], attention_mask[::group_size, :p]  # [B/G, P]
    out = module(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=position_ids[::group_size, :p],
                 use_cache=True)
    first = getattr(out, output)[:, -1:, :].repeat_interleave(group_size, dim=0)  # [B, 1, X]: predicts token 0
    if width - p == 1:
        return first
    cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    cache.batch_repeat_interleave(group_size)
    rest = module(input_ids=input_ids[:, p:-1], attention_mask=attention_mask[:, :-1], position_ids=position_ids[:, p:-1],
                  use_cache=True, **{cache_argument(module): cache})  # predict tokens 1 .. L-1
    return torch.cat([first, getattr(rest, output)], dim=1)  # [B, L, X]


def completion_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor, completion_start: int, group_size: int,
                      share_prompt: bool) -> torch.Tensor:
    """Last hidden states ``[B, L, D]`` (after the final norm) whose LM-head logits predict the
    completion tokens ``input_ids[:, completion_start:]``, from transformers' decoder
    (``model`` passes :func:`chunked_head_refusal`).

    ``share_prompt`` with ``group_size > 1``: each distinct prompt runs once
    (:func:`shared_prompt_forward`); otherwise full rows run and positions ``P-1 .. P+L-2`` are kept."""
    decoder = unwrap_peft(model).get_decoder()
    if share_prompt and group_size > 1:
        return shared_prompt_forward(decoder, "last_hidden_state", input_ids, attention_mask, position_ids,
                                     completion_start, group_size)
    out = decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    return out.last_hidden_state[:, completion_start - 1:-1, :]  # [B, L, D]
