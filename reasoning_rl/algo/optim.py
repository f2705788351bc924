"""The optimiser and learning-rate schedule every algorithm uses for its policy."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

from reasoning_rl import distributed
from reasoning_rl.policy.precision import MixedPrecision
from reasoning_rl.settings.algo import AlgoConfig


def lr_lambda(schedule: str, warmup: int, total: int) -> Callable[[int], float]:
    """Multiplier of the base learning rate at a given step (linear warmup, then the schedule)."""

    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return factor


def build_optimizer(params: Iterable[torch.nn.Parameter], cfg: AlgoConfig,
                    total_updates: int) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW with ``cfg``'s settings and a LambdaLR over ``total_updates`` optimiser steps.

    The fused kernel (one pass over all parameters instead of a loop of small ops; the same
    update up to float rounding) is used where torch has it: float parameters on CPU or CUDA.
    Measured in docs/performance.md."""
    params = [p for p in params if p.requires_grad]  # LoRA: the adapters only (no state for frozen weights)
    fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay,
                                  betas=(cfg.adam_beta1, cfg.adam_beta2), fused=fused or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.lr_schedule, cfg.lr_warmup_steps,
                                                                       total_updates))
    return optimizer, scheduler


def clip_and_measure(params: list[torch.nn.Parameter], max_norm: float,
                     unscale: Callable[[], Any] | None = None) -> float:
    """Global gradient norm before clipping; clips to ``max_norm`` when it is > 0.

    ``unscale`` (fp16 loss scaling, ``reasoning_rl.policy.precision``) divides the gradients by the
    loss scale after they are summed over ranks and before they are measured: the norm and the clip
    are those of the true gradients, and every rank sees the same inf/NaN.

    Data-parallel runs first sum the gradients over ranks (``reasoning_rl.distributed``): the
    losses are divided by the global batch's denominators (``LossNormalizer.for_batch``), so
    the sum is the single-process gradient, and every rank then measures, clips and steps on
    the same numbers. Call it once per optimiser step on every rank."""
    params = list(params)
    distributed.all_reduce_gradients(params)
    if unscale is not None:
        unscale()
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return float(torch.sqrt(sum((p.grad.detach() ** 2).sum() for p in params if p.grad is not None)))


def zero_loss(params: Iterable[torch.nn.Parameter]) -> torch.Tensor:
    """0 * sum_p sum(p): its backward gives each trainable parameter a gradient of exactly 0. A step whose
    rows were all left out (``reasoning_rl.algo.batch.rows_with_gradient``) runs it, so AdamW steps as on a
    zero gradient (its moments decay, weight decay applies) instead of skipping parameters without one,
    fp16's loss scaler sees a backward, and every rank all-reduces the same tensors."""
    return sum((p.sum() * 0.0 for p in params if p.requires_grad), torch.zeros(()))


def step_optimizer(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], max_norm: float,
                   precision: MixedPrecision | None = None) -> float:
    """One optimiser step after the backward passes: sum over ranks, unscale (fp16), measure and clip,
    step (skipped under fp16 when a gradient is inf/NaN). Returns the gradient norm before clipping."""
    precision = precision or MixedPrecision("fp32")
    norm = clip_and_measure(params, max_norm, unscale=lambda: precision.unscale(optimizer))
    precision.step(optimizer)
    return norm
