"""What asynchronous rollouts (``rollout.max_staleness >= 1``, reasoning_rl.rollouts.async_engine) cannot run with,
checked by ``reasoning_rl.config.validate`` (kept apart from the generator's code, which imports the engines)."""

from __future__ import annotations

from typing import Any


def async_problems(cfg: Any) -> list[str]:
    """What ``rollout.max_staleness >= 1`` cannot run with (empty when k = 0 or nothing is wrong)."""
    k = cfg.rollout.max_staleness
    if not k:
        return []
    out = []
    if cfg.rollout.backend == "vllm":
        out.append("rollout.max_staleness needs rollout.backend=hf or native (its generator process holds a CPU "
                   "copy of the policy; vLLM is not built for it here); set rollout.max_staleness=0 with vLLM")
    if cfg.trainer.fsdp:
        out.append("rollout.max_staleness with trainer.fsdp=true is not supported (one generator for one "
                   "process); drop one of them")
    if cfg.rollout.inject.active():
        out.append("rollout.max_staleness with rollout.inject is not supported (rollout.inject.stale=k is the "
                   "synchronous equivalent of max_staleness=k); drop one of them")
    if not cfg.algo.supports_async_rollouts:  # the algorithm's config says (reasoning_rl.algo.base.AlgoConfig)
        out.append(f"rollout.max_staleness with algo.name={cfg.algo.name!r}: its step does not sample once with the "
                   "policy at a known seed (the grpo module and ppo do); set rollout.max_staleness=0")
    if getattr(cfg.algo, "dynamic_sampling", False):
        out.append("rollout.max_staleness with algo.dynamic_sampling=true is not supported (the extra rounds "
                   "cannot be known ahead); drop one of them")
    if getattr(getattr(cfg.model, "lora", None), "r", 0):
        out.append("rollout.max_staleness with model.lora.r > 0 is not supported (untested); drop one of them")
    if getattr(cfg.task, "env", None) is not None:
        out.append(f"rollout.max_staleness with task.env={cfg.task.env!r} is not supported (each turn of an episode "
                   "is prompted by the last one's observation, so its prompts cannot be requested ahead); set "
                   "rollout.max_staleness=0")
    return out


def reference_refusal(cfg: Any) -> str | None:
    """Why the generator process does not compute the reference log-probs of its completions (None: it does).

    The one rule: the generator computes log pi_ref of what it sampled when the algorithm's update reads
    them (it offers its reference: ``generator_reference``, the grpo module) and pi_ref is one frozen model
    for the whole run; otherwise the update computes them, as in the synchronous loop. So not with
    ``algo.beta=0`` (no reference), ``algo.ref_reset_every > 0`` (pi_ref becomes the policy of the step that
    resets it, which the generator of a step ahead does not have yet) or LoRA (pi_ref is the policy's base
    with its adapter off: no model of its own)."""
    a = cfg.algo
    if not cfg.rollout.max_staleness:
        return "rollout.max_staleness=0: no generator process"
    if not getattr(a, "beta", 0.0):
        return "algo.beta=0: no reference model"
    if getattr(a, "ref_reset_every", 0):
        return f"algo.ref_reset_every={a.ref_reset_every}: the reference changes during the run"
    if getattr(getattr(cfg.model, "lora", None), "r", 0):
        return "model.lora.r > 0: the reference is the policy's base with its adapter off"
    return None
