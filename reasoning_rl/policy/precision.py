"""Mixed precision of the training forward (``trainer.precision``), with float32 master weights.

    fp32   every matmul in float32 (the default)
    bf16   the policy's forward passes under ``torch.autocast(bfloat16)``: matmuls and attention
           in bfloat16, reductions (norms, softmax) as autocast decides
    fp16   the same in float16, with dynamic loss scaling (``torch.amp.GradScaler``):
           backward of ``S * loss``; the gradients are divided by ``S`` before clipping; a step
           whose gradients hold inf/NaN is skipped and ``S`` halved; ``S`` doubles after 2,000
           finite steps in a row

What stays float32 whatever the setting (the recipe of Micikevicius et al., "Mixed Precision
Training", arXiv 1710.03740):

- the parameters ("master weights") and AdamW's moments: autocast casts a bfloat16/float16 copy
  of each weight for each matmul, the parameters themselves are never cast; ``model.dtype`` must
  therefore be float32 for bf16/fp16 (a rule of ``reasoning_rl.compat``);
- the LM head's logsumexp: ``reasoning_rl.policy.lm_head`` upcasts each chunk's logits, and the
  full-logits path of ``reasoning_rl.policy.logprobs`` upcasts its logits ("fp32 LM head");
- the loss and its terms (computed from those float32 log-probs, outside autocast).

The frozen models' storage dtype is another setting (``model.reference_dtype``): a reference
policy stored in bfloat16 halves its memory whatever the compute precision.

The compute dtype is recorded on the policy (:func:`mark_precision`) so that the rollout engines
follow it: vLLM's engine runs in it unless ``rollout.vllm_dtype`` says otherwise, and the
trainer/sampler log-prob mismatch that the lower precision causes is ``rollout/logprob_mismatch_*``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
"""``trainer.precision`` -> the autocast dtype of the training forward (None: no autocast)."""

_ATTRIBUTE = "_reasoning_rl_precision"


def compute_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of ``precision`` (None for fp32); an unknown name says which exist."""
    if precision not in PRECISIONS:
        raise ValueError(f"trainer.precision={precision!r} is unknown; choose one of {', '.join(PRECISIONS)}")
    return PRECISIONS[precision]


def precision_problems(precision: str) -> list[str]:
    """An unknown ``trainer.precision`` (config validation); what it cannot run with is in reasoning_rl.compat."""
    if precision not in PRECISIONS:
        return [f"trainer.precision={precision!r} is unknown; choose one of {', '.join(PRECISIONS)}"]
    return []


STORAGE_STEP = {"bfloat16": 2.0 ** -8, "bf16": 2.0 ** -8, "float16": 2.0 ** -11, "fp16": 2.0 ** -11}
"""Half the spacing of representable numbers relative to a value's magnitude (round-to-nearest): an update
smaller than this fraction of a weight leaves it unchanged (bfloat16: 8 significant bits, float16: 11)."""


def storage_rounding_warning(model_dtype: str, precision: str, learning_rate: float) -> str | None:
    """A warning when the trained weights are stored in bf16/fp16 without float32 master weights.

    An AdamW step moves a weight w by about the learning rate lr (its normalised update is ~1), and a
    weight stored with relative step s keeps its value when lr < s |w|: with bfloat16 (s = 2^-8) and
    lr = 1e-6, every weight with |w| > 256 lr = 2.6e-4, nearly all of them, never changes. None when the
    weights are float32 (``trainer.precision=bf16`` keeps float32 master weights)."""
    step = STORAGE_STEP.get(model_dtype)
    if step is None or precision != "fp32":
        return None
    return (f"model.dtype={model_dtype} trains the weights and AdamW's states in {model_dtype}: an update below "
            f"{step:.2g} of a weight rounds away, so at learning rate {learning_rate:g} every weight larger than "
            f"{learning_rate / step:.2g} in magnitude stays unchanged; for float32 master weights use "
            f"model.dtype=float32 trainer.precision=bf16 (and model.reference_dtype={model_dtype})")


def mark_precision(model: Any, precision: str) -> None:
    """Record ``precision`` on the policy, for the engines that sample from it (:func:`precision_of`)."""
    compute_dtype(precision)  # validates the name
    setattr(model, _ATTRIBUTE, precision)


def precision_of(model: Any) -> str:
    """The precision :func:`mark_precision` recorded on ``model``; ``fp32`` when none was."""
    return getattr(model, _ATTRIBUTE, "fp32")


def sampling_dtype(model: Any) -> torch.dtype:
    """The dtype an engine with its own copy of the weights should compute in: the training
    forward's autocast dtype, or the parameters' dtype under fp32."""
    return compute_dtype(precision_of(model)) or next(model.parameters()).dtype


class MixedPrecision:
    """The autocast context, the (scaled) backward and the (unscaled, clipped, maybe skipped) optimiser
    step of one ``trainer.precision`` setting on one device type. Use::

        with mp.autocast():
            logp = forward(...)          # bfloat16/float16 matmuls; float32 log-probs
        mp.backward(loss)                # S * loss under fp16
        grad_norm = reasoning_rl.algo.optim.step_optimizer(optimizer, params, max_norm, mp)
                                         # unscale, clip, step (inf/NaN under fp16: skipped, S halved)
    """

    def __init__(self, precision: str = "fp32", device_type: str = "cpu") -> None:
        self.precision = precision
        self.dtype = compute_dtype(precision)
        self.device_type = device_type
        self.scaler = torch.amp.GradScaler(device_type) if precision == "fp16" else None
        self.skipped_steps = 0
        """fp16: optimiser steps skipped because a gradient was inf/NaN (over the whole run)."""

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` in the compute dtype; a no-op context under fp32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``; under fp16 the backward of ``S * loss`` (small gradients stay representable)."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """fp16: divide the gradients by ``S`` (once per step, after they are summed over ranks)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()``; fp16: only when every gradient is finite, then ``S`` is updated."""
        if self.scaler is None:
            optimizer.step()
            return
        scale = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        if self.scaler.get_scale() < scale:  # update() lowers S exactly when the step was skipped
            self.skipped_steps += 1

    def metrics(self) -> dict[str, float]:
        """fp16: ``precision/loss_scale`` (S after this step) and ``precision/skipped_steps`` (so far); {} otherwise."""
        if self.scaler is None:
            return {}
        return {"precision/loss_scale": float(self.scaler.get_scale()),
                "precision/skipped_steps": float(self.skipped_steps)}

    def state_dict(self) -> dict[str, Any]:
        """The loss scaler's state (fp16), so a resumed run continues with the same ``S``."""
        if self.scaler is None:
            return {}
        return {"scaler": self.scaler.state_dict(), "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.scaler is not None and state and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
            self.skipped_steps = int(state.get("skipped_steps", 0))

