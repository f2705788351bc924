"""What the lean forward computes exactly, and why it refuses a model it does not.

The lean forward (reasoning_rl.policy.lean) implements one architecture: a Llama-family decoder
(RMSNorm, RoPE from the model's own rotary module, grouped-query attention with optional q/k/v
biases, a SiLU-gated MLP, plain ``nn.Linear`` / ``nn.Embedding`` layers). :func:`lean_refusal`
names the first thing of a model outside that; the runtime decision
(reasoning_rl.policy.runtime) then takes transformers' modules and shows the reason. Adding a
model family: docs/models.md.
"""

from __future__ import annotations

from typing import Any

import torch

SUPPORTED_CLASSES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
"""The model classes whose forward the lean runtime reproduces."""

ATTENTION_IMPLEMENTATIONS = (None, "eager", "sdpa")
"""``config._attn_implementation`` values whose attention the lean forward computes (softmax of
scaled scores plus a mask, as two matmuls or ``scaled_dot_product_attention``); a different
kernel (``flash_attention_2``, ``flex_attention``, ...) rounds differently and is kept."""


def lean_refusal(model: Any, training: bool) -> str | None:
    """None when the lean forward computes exactly what ``model`` computes (in training mode
    when ``training``); otherwise the reason it does not, in words."""
    name = type(model).__name__
    if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
        return f"{name}: a peft adapter model (model.lora), whose projections are adapter layers"
    if name not in SUPPORTED_CLASSES:
        return f"{name} is not one of {', '.join(SUPPORTED_CLASSES)} (docs/models.md: adding a model family)"
    cfg = model.config
    attn = getattr(cfg, "_attn_implementation", None)
    if attn not in ATTENTION_IMPLEMENTATIONS:
        return f"attn_implementation={attn} (lean computes eager/sdpa attention only)"
    if getattr(cfg, "hidden_act", None) != "silu":
        return f"hidden_act={cfg.hidden_act!r} (only silu)"
    if "sliding_attention" in (getattr(cfg, "layer_types", None) or []):
        return "sliding-window attention layers"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "rotary_emb") or not hasattr(inner, "layers"):
        return "no model.model.layers / model.model.rotary_emb"
    for layer in inner.layers:
        attn_module = layer.self_attn
        if hasattr(attn_module, "q_norm") or hasattr(attn_module, "k_norm"):
            return "per-head q/k normalisation"
        if getattr(attn_module, "sliding_window", None):
            return "sliding-window attention"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            if type(getattr(attn_module, proj, None)) is not torch.nn.Linear:
                return f"self_attn.{proj} is not a plain nn.Linear (an adapter or quantised layer)"
        for proj in ("gate_proj", "up_proj", "down_proj"):
            if type(getattr(layer.mlp, proj, None)) is not torch.nn.Linear:
                return f"mlp.{proj} is not a plain nn.Linear (an adapter or quantised layer)"
    if type(inner.embed_tokens) is not torch.nn.Embedding or type(model.lm_head) is not torch.nn.Linear:
        return "the embedding or the LM head is not a plain nn.Embedding / nn.Linear"
    if training and getattr(cfg, "attention_dropout", 0.0):
        return f"attention dropout {cfg.attention_dropout} in training mode (the lean forward has no dropout)"
    # Gradient checkpointing's hook that makes the input embeddings require grad (for frozen
    # embeddings under reentrant checkpointing) changes no value; the lean forward may skip it.
    harmless = {h.id for h in getattr(model, "_require_grads_hooks", None) or []}
    for module_name, module in model.named_modules(remove_duplicate=False):  # one walk: hooks and parameters
        if set(module._forward_hooks) - harmless or module._forward_pre_hooks:
            return f"forward hooks on {module_name or 'the model'} (they would be skipped)"
        if any(p is not None and type(p) is not torch.nn.Parameter for p in module._parameters.values()):
            return "parameters that are not plain tensors (sharded or wrapped)"
    return None


def lean_decoder_support(model: Any) -> str | None:
    """:func:`lean_refusal` of ``model`` in its current mode (None: the lean forward computes it)."""
    return lean_refusal(model, model.training)
