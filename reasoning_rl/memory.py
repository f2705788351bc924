"""What training holds in memory: parameters, gradients and optimiser states counted in bytes,
plus the process's peak resident memory (CPU) and the CUDA allocator's peak (GPU).

The byte counts are exact (sums over the tensors), whatever the device; activations are not
in them, which is what the peaks add. Used to compare algorithms on equal footing, e.g.
GRPO (policy + reference) against PPO (policy + reference + critic), DeepSeekMath sec. 4.1.
"""

from __future__ import annotations

import ctypes
import resource
import sys
from collections.abc import Iterable
from typing import Any

import torch


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


KEPT_MEMORY = {"mmap_threshold": 32 * 2**20, "trim_threshold": 2**30, "top_pad": 64 * 2**20}
"""glibc malloc settings of :func:`keep_freed_memory`, in bytes (32 MiB is the largest mmap
threshold glibc accepts on 64-bit Linux)."""
_MALLOPT = {"trim_threshold": -1, "top_pad": -2, "mmap_threshold": -3}
"""``mallopt`` parameter numbers (glibc's ``malloc.h``: M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD)."""


RETURN_LARGE_BLOCKS = {"mmap_threshold": 2**20, "trim_threshold": 2**30, "top_pad": 64 * 2**20}
"""glibc malloc settings that hand blocks of 1 MiB or more back to the kernel when freed (each is its own
``mmap``, and a fixed threshold stops glibc raising it after the first large free) while the heap of
smaller blocks is kept as :data:`KEPT_MEMORY` keeps it. At SmolLM2-135M's size the activations are
blocks of several MiB; kept, their freed holes stay resident (docs/models.md: 4.40 GB resident against
~2 GB of live tensors with the chunked LM head and checkpointing)."""

KEEP_ALL_MAX_PARAMETERS = 50_000_000
"""``trainer.keep_freed_memory: auto`` keeps every freed block (:data:`KEPT_MEMORY`) for a policy below
this many parameters on the CPU (the tiny models, whose speed it is for); from this size up it returns
large blocks (:data:`RETURN_LARGE_BLOCKS`) when the run trains with gradient checkpointing, and keeps
them otherwise (:func:`allocator_choice`)."""


def allocator_choice(setting: bool | None, parameters: int, on_cpu: bool,
                     checkpointing: bool = False) -> tuple[str, dict[str, int]]:
    """What ``trainer.keep_freed_memory`` = ``setting`` (True, False or None = auto) means for a policy of
    ``parameters`` parameters (``checkpointing``: ``model.gradient_checkpointing``): a name and its malloc
    settings. auto: ``kept`` on a GPU (the tensors that matter are not malloc's), on a CPU below
    :data:`KEEP_ALL_MAX_PARAMETERS`, and from that size up without checkpointing; ``large blocks
    returned`` from that size up with checkpointing.

    Why checkpointing decides (SmolLM2-135M, docs/real_model.md): without it a step's activations are
    alive together, so the holes kept blocks leave are few: kept, the GRPO step's peak RSS was 6.55 GB
    against 6.15 GB returned, and its page faults 0.77M a step against 3.71M. With it the live tensors
    are small and the holes are most of the peak (4.59 GB kept against 2.00 GB returned, docs/models.md):
    a run that recomputes activations to save memory would lose that saving."""
    large_and_lean = on_cpu and parameters >= KEEP_ALL_MAX_PARAMETERS and checkpointing
    keep = setting if setting is not None else not large_and_lean
    return ("kept", KEPT_MEMORY) if keep else ("large blocks returned", RETURN_LARGE_BLOCKS)


def set_allocator(settings: dict[str, int]) -> bool:
    """Apply glibc ``mallopt`` ``settings`` (:data:`KEPT_MEMORY` or :data:`RETURN_LARGE_BLOCKS`) to this
    process; False where it does not apply (not Linux, no ``mallopt``, or a setting refused: musl)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(_MALLOPT[name], value) == 1 for name, value in settings.items())


def keep_freed_memory() -> bool:
    """Ask glibc's ``malloc`` to keep freed memory for reuse instead of handing it back to the
    kernel (:data:`KEPT_MEMORY`): blocks up to ``mmap_threshold`` bytes come from the heap rather
    than from their own ``mmap`` (which ``free`` unmaps), the heap is trimmed only when
    ``trim_threshold`` bytes at its top are free, and it grows by ``top_pad`` bytes more than
    asked (address space: pages count as resident only once touched). Without the padding, a
    heap whose top is pinned by a small live block grew a little every step and faulted in what
    it grew. Returns False where it does not apply: no ``mallopt`` in the process (not Linux), or
    one refused (musl's returns 0 for every call; the settings before a refusal stay made).
    Process-wide and kept for the process's life (a notebook or test process that builds a
    trainer keeps it); processes started afresh (the reward workers, the sandbox) do not inherit it.

    Why: a training step allocates and frees the same activations every step (a 1 MiB MLP
    activation is 256 pages). With glibc's defaults many of them come back as fresh pages, and
    each first touch is a page fault, about 3 us on the development VM: 2200-2500 faults a step
    on the benchmark workload (~7 ms of a ~160 ms step), 0 with this (docs/performance.md). Same numbers computed, no
    change to any result; the process keeps what it freed (its peak resident memory stays that
    of its largest step). :func:`glibc_tunables` gives the same settings to another process."""
    return set_allocator(KEPT_MEMORY)


def glibc_tunables(settings: dict[str, int] = KEPT_MEMORY) -> str:
    """``settings`` (default :data:`KEPT_MEMORY`) as a ``GLIBC_TUNABLES`` value, for a process started with
    it in its environment (glibc reads it at start-up): the same allocator settings without code in it."""
    return ":".join(f"glibc.malloc.{name}={value}" for name, value in settings.items())


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
