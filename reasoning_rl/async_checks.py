"""Whether the asynchronous generator (``rollout.max_staleness >= 1``, reasoning_rl.rollouts.async_engine) computes
the reference log-probs of what it samples. What asynchronous rollouts cannot run with is in reasoning_rl.compat."""

from __future__ import annotations

from typing import Any


def reference_refusal(cfg: Any) -> str | None:
    """Why the generator process does not compute the reference log-probs of its completions (None: it does).

    The one rule: the generator computes log pi_ref of what it sampled when the algorithm's update reads
    them (it offers its reference: ``generator_reference``, the grpo module) and pi_ref is one frozen model
    for the whole run; otherwise the update computes them, as in the synchronous loop. So not without a
    reference (``algo.kl.beta=0``), not when the reference is reset during the run (``algo.kl.ref_reset_every
    > 0``: pi_ref becomes the policy of the step that resets it, which the generator of a step ahead does not
    have yet) and not with LoRA (pi_ref is the policy's base with its adapter off: no model of its own)."""
    a = cfg.algo
    if not cfg.rollout.max_staleness:
        return "rollout.max_staleness=0: no generator process"
    if not a.uses_reference():
        return "algo.kl.beta=0: no reference model"
    if a.reference_changes():
        return "algo.kl.ref_reset_every > 0: the reference changes during the run"
    if cfg.model.lora.r:
        return "model.lora.r > 0: the reference is the policy's base with its adapter off"
    return None
