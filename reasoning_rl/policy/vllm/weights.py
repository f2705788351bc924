"""The trainer's ``state_dict`` as the names and tensors vLLM's in-place reload takes
(reasoning_rl.policy.vllm)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
"""Name parts added by DDP, torch.compile, FSDP and activation checkpointing wrappers (at the front)."""
INNER_WRAPPER_PARTS = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
"""The ones that can also sit inside a name (wrapped submodules); ``module.`` only counts at the front."""
SKIPPED_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")
"""Buffers that HF models may carry in their state_dict and vLLM computes itself."""


def vllm_weight_name(name: str) -> str:
    """A state_dict key without wrapper prefixes (``module.model.layers.0...`` -> ``model.layers.0...``)."""
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix):], True
    for part in INNER_WRAPPER_PARTS:
        name = name.replace(f".{part}", ".")
    return name


def vllm_weights(state_dict: Mapping[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs for vLLM's ``reload_weights``: Hugging Face names (vLLM maps them
    onto its fused layers), wrapper prefixes stripped, rotary caches dropped. A tied
    ``lm_head.weight`` is kept: vLLM's reload re-processes every layer it is given, and a head it
    is not given stays as it was. Tensors are detached, not copied."""
    out = []
    for key, tensor in state_dict.items():
        name = vllm_weight_name(key)
        if not name.endswith(SKIPPED_SUFFIXES):
            out.append((name, tensor.detach()))
    return out
