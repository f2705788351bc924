"""The frozen reference policy pi_ref of the KL term: the policy as RL starts.

Written once to ``<run>/reference/`` (atomically) so a resumed run reloads the same
pi_ref instead of taking the policy of its last checkpoint.
"""

from __future__ import annotations

import copy
from typing import Any

from reasoning_rl import distributed
from reasoning_rl.algo.base import RunContext
from reasoning_rl.policy.lm_head import chunk_of, set_chunk
from reasoning_rl.policy.loading import load_pretrained, resolve_dtype
from reasoning_rl.policy.lora import AdapterDisabled, is_lora
from reasoning_rl.policy.runtime import runtime_of, set_runtime
from reasoning_rl.run_folder.atomic import atomic_directory_write


def frozen_reference(ctx: RunContext) -> Any:
    """pi_ref for this run: a copy of the current policy, or the saved one when resuming."""
    ref_dir = ctx.run_dir / "reference"
    if is_lora(ctx.model):  # LoRA: the policy's own base with the adapter off, no copy (reasoning_rl.policy.lora)
        return AdapterDisabled(ctx.model)
    if ctx.resumed:
        if not (ref_dir / "config.json").exists():
            raise FileNotFoundError(f"cannot resume with a KL term: the reference policy {ref_dir} is missing; "
                                    "start a new run folder or set algo.kl.beta=0")
        ref, _ = load_pretrained(str(ref_dir), device=ctx.cfg.model.device,
                                 dtype=ctx.cfg.model.reference_dtype or ctx.cfg.model.dtype)
        set_chunk(ref, chunk_of(ctx.model))  # the policy's LM-head chunk, as the deep copy of a fresh run has
        set_runtime(ref, runtime_of(ctx.model))  # the policy's runtime (model.runtime), as the deep copy carries it
    else:
        ref = copy.deepcopy(ctx.model)
        if ctx.cfg.model.reference_dtype:  # stored in its own dtype (model.reference_dtype)
            ref.to(resolve_dtype(ctx.cfg.model.reference_dtype))
        if distributed.is_main():  # data-parallel: one writer (every rank holds the same policy)
            atomic_directory_write(ref_dir, lambda tmp: (ref.save_pretrained(tmp), ctx.tokenizer.save_pretrained(tmp)))
    return ref.eval().requires_grad_(False)


def reset_reference(ctx: RunContext, ref: Any) -> None:
    """Iterative GRPO (DeepSeekMath sec. 4.1.3): pi_ref <- the current policy, saved again so a
    resumed run continues with the same reference."""
    ref.load_state_dict(ctx.model.state_dict())
    if distributed.is_main():
        atomic_directory_write(ctx.run_dir / "reference", lambda tmp: (ref.save_pretrained(tmp),
                                                                       ctx.tokenizer.save_pretrained(tmp)))
