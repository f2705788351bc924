"""What cannot run together: every "A with B is not supported" rule of a training run, as data.

Each :class:`Rule` names the two things it keeps apart, when it applies (a predicate on the composed
``TrainConfig`` and the number of processes), why, and what to do. :func:`problems` is the one place
these refusals come from (``reasoning_rl.validation.validate`` adds them to its ``ConfigError``; the run
loop calls :func:`refuse` once the number of processes is known), and docs/compatibility.md is made
from :data:`RULES` and the algorithms' :class:`~reasoning_rl.algo.base.Capabilities`
(:func:`markdown`; a test fails when the page differs).

Rules about an algorithm ask its capabilities and what its settings make it do
(``AlgoConfig.uses_reference()``, ``resamples()``, ...), never one algorithm's field names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from reasoning_rl.algo.registry import get_algorithm, list_algorithms
from reasoning_rl.config_checks import ConfigError, problems_message
from reasoning_rl.settings.algo import Capabilities

Check = Callable[[Any, int], bool]
"""(TrainConfig, number of processes) -> the rule applies."""


def _fsdp(c: Any) -> bool:
    return bool(c.trainer.fsdp)


def _async(c: Any) -> bool:
    return bool(c.rollout.max_staleness)


def _lora(c: Any) -> bool:
    return c.model.lora.r > 0


def _mixed(c: Any) -> bool:
    return c.trainer.precision in ("bf16", "fp16")


@dataclass(frozen=True)
class Rule:
    """Two things that cannot run together."""

    first: str
    """The setting that asks for the feature, as a reader writes it (``trainer.fsdp=true``)."""
    second: str
    """What it cannot run with (``rollout.backend=vllm``, ``an algorithm without lora``)."""
    applies: Check
    message: Callable[[Any], str]
    """The one line of the refusal (it says why and what to do); may name the config's values."""
    reason: str
    """Why, in a few words (the docs table's column)."""


RULES: tuple[Rule, ...] = (
    # -- trainer.fsdp=true: every rank must run the same collectives, and only policy/reference are sharded --
    Rule("trainer.fsdp=true", "an algorithm without fsdp",
         lambda c, n: _fsdp(c) and not c.algo.capabilities.fsdp,
         lambda c: f"trainer.fsdp=true does not support algo.name={c.algo.name!r}: "
                   f"{c.algo.capabilities.fsdp_blocker}; drop trainer.fsdp for the replicated data-parallel run",
         "ranks must run the same forward/backward passes, and only the policy and reference are sharded"),
    Rule("trainer.fsdp=true", "algo.dynamic_sampling.enabled=true",
         lambda c, n: _fsdp(c) and c.algo.capabilities.fsdp and c.algo.resamples(),
         lambda c: "trainer.fsdp=true with algo.dynamic_sampling.enabled=true is not supported: ranks may keep "
                   "different numbers of groups, hence run different numbers of forward/backward passes, and "
                   "FSDP's collectives would wait forever; set algo.dynamic_sampling.enabled=false",
         "ranks would run different numbers of passes"),
    Rule("trainer.fsdp=true", "algo.skip_zero_advantage_groups=true",
         lambda c, n: _fsdp(c) and c.algo.capabilities.fsdp and c.algo.varies_passes(),
         lambda c: "trainer.fsdp=true with algo.skip_zero_advantage_groups=true is not supported: ranks may leave "
                   "out different numbers of groups, hence run different numbers of forward/backward passes, and "
                   "FSDP's collectives would wait forever; set algo.skip_zero_advantage_groups=false",
         "ranks would run different numbers of passes"),
    Rule("trainer.fsdp=true", "algo.kl.ref_reset_every > 0",
         lambda c, n: _fsdp(c) and c.algo.capabilities.fsdp and c.algo.reference_changes(),
         lambda c: "trainer.fsdp=true with algo.kl.ref_reset_every > 0 is not supported (resetting and saving a "
                   "sharded reference is not built); set algo.kl.ref_reset_every=0",
         "resetting a sharded reference is not built"),
    Rule("trainer.fsdp=true", "rollout.backend=vllm",
         lambda c, n: _fsdp(c) and c.rollout.backend == "vllm",
         lambda c: "trainer.fsdp=true with rollout.backend=vllm is not supported (the weight sync reads a whole "
                   "state_dict on each rank and is untested with shards); use rollout.backend=hf or native",
         "the weight sync reads whole state_dicts"),
    Rule("rollout.inject", "trainer.fsdp=true",
         lambda c, n: c.rollout.inject.active() and _fsdp(c),
         lambda c: "rollout.inject with trainer.fsdp=true is not supported (the copy would need the full "
                   "weights on every rank); drop one of them",
         "the sampler's copy would need the full weights on every rank"),
    # -- rollout.max_staleness >= 1: one generator process ahead of one trainer process --
    Rule("rollout.max_staleness", "rollout.backend=vllm",
         lambda c, n: _async(c) and c.rollout.backend == "vllm",
         lambda c: "rollout.max_staleness needs rollout.backend=hf or native (its generator process holds a CPU "
                   "copy of the policy; vLLM is not built for it here); set rollout.max_staleness=0 with vLLM",
         "the generator holds a CPU copy of the policy"),
    Rule("rollout.max_staleness", "trainer.fsdp=true",
         lambda c, n: _async(c) and _fsdp(c),
         lambda c: "rollout.max_staleness with trainer.fsdp=true is not supported (one generator for one "
                   "process); drop one of them",
         "one generator for one trainer process"),
    Rule("rollout.max_staleness", "several processes (torchrun)",
         lambda c, n: _async(c) and n > 1,
         lambda c: "rollout.max_staleness with several processes (torchrun) is not supported (one generator for "
                   "one trainer process); set rollout.max_staleness=0 or run one process",
         "one generator for one trainer process"),
    Rule("rollout.max_staleness", "rollout.inject",
         lambda c, n: _async(c) and c.rollout.inject.active(),
         lambda c: "rollout.max_staleness with rollout.inject is not supported (rollout.inject.stale=k is the "
                   "synchronous equivalent of max_staleness=k); drop one of them",
         "inject.stale=k is its synchronous twin"),
    Rule("rollout.max_staleness", "an algorithm without async_rollouts",
         lambda c, n: _async(c) and not c.algo.capabilities.async_rollouts,
         lambda c: f"rollout.max_staleness with algo.name={c.algo.name!r}: its step does not sample once with the "
                   "policy at a known seed (the grpo module and ppo do); set rollout.max_staleness=0",
         "its step does not sample once at a known seed"),
    Rule("rollout.max_staleness", "algo.dynamic_sampling.enabled=true",
         lambda c, n: _async(c) and c.algo.resamples(),
         lambda c: "rollout.max_staleness with algo.dynamic_sampling.enabled=true is not supported (the extra "
                   "rounds cannot be known ahead); drop one of them",
         "the extra rounds cannot be known ahead"),
    Rule("rollout.max_staleness", "model.lora.r > 0",
         lambda c, n: _async(c) and _lora(c),
         lambda c: "rollout.max_staleness with model.lora.r > 0 is not supported (untested); drop one of them",
         "untested"),
    Rule("rollout.max_staleness", "task.env",
         lambda c, n: _async(c) and c.task.env is not None,
         lambda c: f"rollout.max_staleness with task.env={c.task.env!r} is not supported (each turn of an episode "
                   "is prompted by the last one's observation, so its prompts cannot be requested ahead); set "
                   "rollout.max_staleness=0",
         "an episode's next prompt is not known ahead"),
    # -- model.lora.r > 0: an adapter on a frozen base, the base as the reference --
    Rule("model.lora.r > 0", "an algorithm without lora",
         lambda c, n: _lora(c) and not c.algo.capabilities.lora,
         lambda c: f"model.lora.r > 0 is not built into algo.name={c.algo.name!r} (the grpo module and its "
                   "variants have it); set model.lora.r=0",
         "not built into its update"),
    Rule("model.lora.r > 0", "trainer.fsdp=true",
         lambda c, n: _lora(c) and _fsdp(c),
         lambda c: "model.lora.r > 0 with trainer.fsdp=true is not supported (an adapter trains a small share of "
                   "the model: replicate it instead); drop trainer.fsdp",
         "an adapter is small: replicate it"),
    Rule("model.lora.r > 0", "algo.kl.ref_reset_every > 0",
         lambda c, n: _lora(c) and c.algo.reference_changes(),
         lambda c: "model.lora.r > 0 with algo.kl.ref_reset_every > 0 is not supported (the reference is the base "
                   "with the adapter off; resetting it would mean merging the adapter); set algo.kl.ref_reset_every=0",
         "the reference is the base with the adapter off"),
    # -- trainer.precision=bf16/fp16: autocast over float32 master weights --
    Rule("trainer.precision=bf16/fp16", "model.dtype other than float32",
         lambda c, n: _mixed(c) and c.model.dtype not in ("float32", "fp32"),
         lambda c: f"trainer.precision={c.trainer.precision} keeps float32 master weights, so model.dtype must be "
                   f"float32, not {c.model.dtype}; set model.dtype=float32 (or trainer.precision=fp32 to train in "
                   f"{c.model.dtype} itself)",
         "master weights stay float32"),
    Rule("trainer.precision=bf16/fp16", "an algorithm without mixed_precision",
         lambda c, n: _mixed(c) and not c.algo.capabilities.mixed_precision,
         lambda c: f"trainer.precision={c.trainer.precision} is not built into algo.name={c.algo.name!r} (the grpo "
                   "module and its variants have it); set trainer.precision=fp32",
         "not built into its update"),
)
"""Every combination a training run refuses; docs/compatibility.md is made from it."""


def problems(cfg: Any, world_size: int = 1) -> list[str]:
    """The refusals of ``cfg`` (a ``TrainConfig``) run by ``world_size`` processes, one line each."""
    return [rule.message(cfg) for rule in RULES if rule.applies(cfg, world_size)]


def refuse(cfg: Any, world_size: int) -> None:
    """Raise a :class:`ConfigError` naming every refusal (for the run loop, once it knows the processes)."""
    found = problems(cfg, world_size)
    if found:
        raise ConfigError(problems_message(found))


CAPABILITY_NAMES = tuple(f.name for f in fields(Capabilities) if f.type in (bool, "bool"))


def markdown() -> str:
    """docs/compatibility.md: the algorithms' capabilities and the rules, from the code."""
    lines = ["# What runs with what", "",
             "Generated from `reasoning_rl/compat.py` and each algorithm's `Capabilities` "
             "(`reasoning_rl/algo/base.py`) by `python -m reasoning_rl.compat > docs/compatibility.md`; "
             "a test fails when this page differs. A refused combination stops the run before it writes "
             "anything, in one line that says why and what to do (exit code 2).", "",
             "## What each algorithm supports", "",
             "| algo.name | " + " | ".join(CAPABILITY_NAMES) + " |",
             "|---|" + "---|" * len(CAPABILITY_NAMES)]
    for name in list_algorithms():
        entry = get_algorithm(name)
        if not entry.algorithm.__module__.startswith("reasoning_rl."):
            continue  # the page documents the built-in algorithms; a plugin's are its own to document
        caps = entry.config_class.capabilities
        lines.append(f"| {name} | " + " | ".join("yes" if getattr(caps, k) else "no" for k in CAPABILITY_NAMES) + " |")
    lines += ["", "## What cannot run together", "", "| setting | cannot run with | why |", "|---|---|---|"]
    lines += [f"| `{r.first}` | `{r.second}` | {r.reason} |" for r in RULES]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
