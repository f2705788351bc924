"""The policy made ready to train, once it is loaded (reasoning_rl.trainer): the memory allocator
(``trainer.keep_freed_memory``), the precision engines with their own weights follow
(``trainer.precision``, reasoning_rl.policy.precision) and the runtime of the training log-probs and the
native engine (``model.runtime``, reasoning_rl.policy.runtime), each said in the log."""

from __future__ import annotations

import logging
from typing import Any

from reasoning_rl.memory import allocator_choice, set_allocator
from reasoning_rl.policy.precision import mark_precision
from reasoning_rl.policy.runtime import RuntimeDecision, decide_runtime, set_runtime

log = logging.getLogger(__name__)


def prepare_policy(model: Any, cfg: Any, sharded: bool) -> RuntimeDecision:
    """Set the allocator, mark the precision and decide the runtime of ``model`` for the run ``cfg``
    (a TrainConfig; ``sharded``: trainer.fsdp over several ranks). Returns the runtime decided."""
    device = next(model.parameters()).device
    # trainer.keep_freed_memory: glibc keeps freed blocks (no page faults) or returns large ones (a lower peak
    # for a large model with gradient checkpointing).
    allocator, settings = allocator_choice(cfg.trainer.keep_freed_memory, sum(p.numel() for p in model.parameters()),
                                           device.type == "cpu", checkpointing=cfg.model.gradient_checkpointing)
    setting = "auto" if cfg.trainer.keep_freed_memory is None else cfg.trainer.keep_freed_memory
    log.info("memory allocator: %s (trainer.keep_freed_memory=%s)%s", allocator, setting,
             "" if set_allocator(settings) else "; not applied: this C library has no mallopt or refused it")
    mark_precision(model, cfg.trainer.precision)  # engines with their own weights (vLLM) follow it
    # model.runtime, decided once: the training log-probs and the native engine run what it says.
    runtime = decide_runtime(model, cfg.model.runtime, training=True, sharded=sharded)
    set_runtime(model, runtime)
    log.info("policy runtime: %s", runtime.describe())
    return runtime
