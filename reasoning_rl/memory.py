"""What training holds in memory: parameters, gradients and optimiser states counted in bytes,
plus the process's peak resident memory (CPU) and the CUDA allocator's peak (GPU).

The byte counts are exact (sums over the tensors), whatever the device; activations are not
in them, which is what the peaks add. Used to compare algorithms on equal footing, e.g.
GRPO (policy + reference) against PPO (policy + reference + critic), DeepSeekMath sec. 4.1.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Iterable
from typing import Any

import torch


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _unique(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    seen, out = set(), []
    for t in tensors:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            out.append(t)
    return out


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of distinct tensors (a tensor shared by two models, tied weights, counts once)."""
    return sum(t.numel() * t.element_size() for t in _unique(tensors))


def training_state_bytes(models: Iterable[Any], optimizers: Iterable[torch.optim.Optimizer]) -> dict[str, int]:
    """Parameters of every model held (trainable or frozen), their gradients, and the
    optimisers' states (Adam's two moments and step counters)."""
    models = list(models)
    params = [p for m in models for p in m.parameters()]
    grads = [p.grad for p in params if p.grad is not None]
    states = [v for opt in optimizers for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    return {"parameters": tensor_bytes(params), "gradients": tensor_bytes(grads), "optimizer": tensor_bytes(states)}


def memory_report(models: Iterable[Any], optimizers: Iterable[torch.optim.Optimizer]) -> dict[str, float]:
    """Everything above in GB, for summary.json and the sweep report."""
    gb = 1024 ** 3
    counted = training_state_bytes(models, optimizers)
    out = {f"{k}_gb": v / gb for k, v in counted.items()}
    out["state_gb"] = sum(counted.values()) / gb
    out["peak_rss_gb"] = peak_rss_bytes() / gb
    if torch.cuda.is_available():
        out["cuda_max_allocated_gb"] = torch.cuda.max_memory_allocated() / gb
    return out
