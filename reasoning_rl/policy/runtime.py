"""Which runtime computes the policy's forward, decided once at start-up and said with its reason.

Two runtimes compute the same function of the same weights:

- ``hf``: transformers' own modules (any causal LM, any device, every ``attn_implementation``);
- ``lean``: :mod:`reasoning_rl.policy.lean`, the Llama/Qwen2 forward in a handful of tensor ops per
  layer read from the model's own parameters (sampling with ``rollout.backend=native``, and the
  training log-probs); measured about 2x faster than the module stack on a CPU
  (docs/performance.md), never measured faster on an accelerator.

``model.runtime`` chooses: ``hf``, ``lean`` (an error naming why when the model cannot run it),
or ``auto``: lean on the CPU when the model is one it computes exactly, else hf. The trainer
decides once (:func:`decide_runtime`), records the decision on the model (:func:`set_runtime`;
the reference, a copy of the policy, inherits it), prints it in the run header and writes it to
``summary.json``; the training log-probs and the native engine read it (:func:`uses_lean`)
instead of re-deciding per call. A model that reaches them undecided (a library caller, a test)
gets ``auto`` decided at its first use, once.

The start-up equality check that the decision computes what the modules compute is
:mod:`reasoning_rl.policy.runtime_check`. Adding a model family: docs/models.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from reasoning_rl.errors import UserError
from reasoning_rl.policy.lean.support import lean_refusal

Runtime = Literal["hf", "lean"]
SETTINGS = ("auto", "hf", "lean")
"""The values of ``model.runtime``."""

_ATTRIBUTE = "_reasoning_rl_runtime"


class RuntimeSettingError(UserError, ValueError):
    """``model.runtime`` is not one of :data:`SETTINGS`, or asks for ``lean`` on a model it cannot run."""


@dataclass(frozen=True)
class RuntimeDecision:
    """What ``model.runtime`` resolved to for one model, and why."""

    requested: str
    """The setting: auto, hf or lean."""
    runtime: Runtime
    """What runs: hf (transformers' modules) or lean (reasoning_rl.policy.lean)."""
    reason: str
    """Why, in words: the model class, device and dtype lean runs on, or why it does not."""
    cpu_capability: str = field(default_factory=lambda: torch.backends.cpu.get_cpu_capability())
    """The CPU kernel set torch dispatches to (AVX512, AVX2, DEFAULT; ``ATEN_CPU_CAPABILITY`` forces a lower
    one). Float results differ between kernel sets by rounding, and so can a whole run's figures:
    ``summary.json``'s ``policy_runtime`` says which produced them."""

    def describe(self) -> str:
        """One line for the run header: ``auto -> lean: LlamaForCausalLM on CPU, float32``."""
        if self.requested == "auto":
            return f"auto -> {self.runtime}: {self.reason}"
        return f"{self.runtime}: {self.reason}"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def decide_runtime(model: Any, requested: str = "auto", training: bool = True,
                   sharded: bool = False) -> RuntimeDecision:
    """The runtime ``model`` runs on for the setting ``requested``.

    ``training``: the model will be trained (its dropout is on), as the trainer's policy is.
    ``sharded``: its parameters will be sharded over ranks (``trainer.fsdp``), which the lean
    forward, reading whole tensors, cannot compute with.
    ``lean`` on a model the lean forward does not compute exactly raises
    :class:`RuntimeSettingError` naming why; ``auto`` then takes ``hf`` and says why; ``auto`` also
    takes ``hf`` off the CPU, where lean was never measured faster."""
    if requested not in SETTINGS:
        raise RuntimeSettingError(f"model.runtime={requested!r} is unknown; choose one of {', '.join(SETTINGS)} "
                                  "(auto: lean on the CPU where the model allows it, else hf)")
    if requested == "hf":
        return RuntimeDecision(requested, "hf", "transformers' modules, as asked (model.runtime=hf)")
    refusal = "trainer.fsdp shards the parameters over the ranks (lean reads whole tensors)" if sharded else None
    refusal = refusal or lean_refusal(model, training)
    where = _where(model)
    if requested == "lean":
        if refusal is not None:
            raise RuntimeSettingError(f"model.runtime=lean refused: {refusal}; use model.runtime=hf (or auto, "
                                      "which falls back to hf and says why)")
        return RuntimeDecision(requested, "lean", f"{type(model).__name__} on {where}, as asked (model.runtime=lean)")
    if refusal is not None:
        return RuntimeDecision(requested, "hf", f"lean refused: {refusal}")
    if _device(model) != "cpu":
        return RuntimeDecision(requested, "hf", f"the model is on {where}; lean is measured faster only on the CPU "
                                                "(model.runtime=lean forces it)")
    return RuntimeDecision(requested, "lean", f"{type(model).__name__} on {where}")


def set_runtime(model: Any, decision: RuntimeDecision) -> None:
    """Record ``decision`` on ``model``: its log-probs and the native engine run what it says."""
    setattr(model, _ATTRIBUTE, decision)


def runtime_of(model: Any) -> RuntimeDecision:
    """The decision recorded on ``model``; an undecided model gets ``auto`` decided now (in its
    current training mode) and recorded, so it is decided once."""
    decision = getattr(model, _ATTRIBUTE, None)
    if decision is None:
        decision = decide_runtime(model, "auto", training=bool(getattr(model, "training", False)))
        set_runtime(model, decision)
    return decision


def uses_lean(model: Any) -> bool:
    """Whether ``model``'s forward runs on the lean runtime (:func:`runtime_of`)."""
    return runtime_of(model).runtime == "lean"


def _device(model: Any) -> str:
    param = next(model.parameters(), None)
    return "cpu" if param is None else param.device.type


def _where(model: Any) -> str:
    param = next(model.parameters(), None)
    if param is None:
        return "CPU"
    device = "CPU" if param.device.type == "cpu" else str(param.device)
    return f"{device}, {str(param.dtype).removeprefix('torch.')}"
