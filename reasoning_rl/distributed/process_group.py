"""The process group and the collectives the shared training code needs, each a no-op in a
single process (the overview of a data-parallel run: ``reasoning_rl.distributed``)."""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

T = TypeVar("T")

RANK_SEED_STRIDE = 1_000_000_007
"""Sampling seeds of rank r are offset by r * this prime (rank 0 keeps the single-process seed)."""


def is_distributed() -> bool:
    """True when a process group with more than one rank is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    """Number of ranks (1 without a process group)."""
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if is_distributed() else 0


def is_main() -> bool:
    """True on rank 0, the only rank that writes the run folder."""
    return rank() == 0


def init_from_env(backend: str | None = None, timeout_s: float = 1800.0) -> bool:
    """Start the process group from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT) when WORLD_SIZE > 1 and none is running yet.

    ``backend`` None picks nccl when CUDA is available (and sets this process's GPU to
    LOCAL_RANK), gloo otherwise. Returns True when this call started the group (its caller
    should :func:`shutdown` it). A group that is already running is used as it is."""
    if dist.is_available() and dist.is_initialized():
        return False
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return False
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend, timeout=dt.timedelta(seconds=timeout_s))
    log.info("torch.distributed: rank %d of %d (local rank %d, %s)", dist.get_rank(), size, local_rank, backend)
    return True


def shutdown(barrier: bool = True) -> None:
    """Destroy the process group (after a final barrier, unless ``barrier=False``: after an error,
    when the other ranks may never get there) if one is running."""
    if dist.is_available() and dist.is_initialized():
        if barrier and dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()


def local_device() -> torch.device | None:
    """``cuda:LOCAL_RANK`` in a multi-GPU run (each rank holds its model on its own GPU), else None."""
    if is_distributed() and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return None


def barrier() -> None:
    """Wait until every rank gets here."""
    if is_distributed():
        dist.barrier()


def rank_seed(seed: int | None) -> int | None:
    """The sampling seed of this rank: ``seed + rank * RANK_SEED_STRIDE`` (rank 0: ``seed``).
    Ranks sample different prompts anyway; distinct seeds keep their random streams independent."""
    return None if seed is None else seed + rank() * RANK_SEED_STRIDE


def shard_bounds(total: int, what: str = "items") -> tuple[int, int]:
    """``[start, end)`` of this rank's contiguous shard of ``total`` items; ``total`` must be a
    multiple of the world size (every rank gets the same amount of work)."""
    size = world_size()
    if total % size:
        raise ValueError(f"{total} {what} cannot be split evenly over {size} ranks; "
                         f"use a multiple of {size} (or launch a number of processes that divides {total})")
    share = total // size
    return rank() * share, (rank() + 1) * share


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over ranks, in place; returns it."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def sum_floats(values: Sequence[float]) -> list[float]:
    """Each value summed over ranks (one float64 all-reduce for all of them)."""
    if not is_distributed():
        return list(values)
    t = torch.tensor(list(values), dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def any_rank(flag: bool) -> bool:
    """True when ``flag`` is true on at least one rank (a decision every rank then takes alike)."""
    if not is_distributed():
        return flag
    t = torch.tensor([int(flag)], dtype=torch.int32, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return bool(t.item() > 0)


def all_reduce_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """Sum every parameter's ``.grad`` over ranks, in place (one flat buffer per dtype and device).

    A parameter without a gradient on this rank takes part as zeros when another rank has one;
    parameters without a gradient on every rank keep ``grad is None`` (as in a single process).
    Sharded parameters (FSDP2's DTensors) are left out: FSDP has already reduce-scattered their
    gradients over the ranks, summing them again would count every rank's share twice."""
    if not is_distributed():
        return
    params = [p for p in params if not _is_dtensor(p)]
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=_collective_device())
    dist.all_reduce(has, op=dist.ReduceOp.SUM)
    live = [p for p, n in zip(params, has.tolist()) if n > 0]
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    buckets: dict[tuple[torch.dtype, torch.device], list[torch.nn.Parameter]] = {}
    for p in live:
        buckets.setdefault((p.grad.dtype, p.grad.device), []).append(p)
    for group in buckets.values():
        flat = torch.cat([p.grad.reshape(-1) for p in group])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in group:
            n = p.grad.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n


def broadcast_parameters(module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers into every rank's ``module`` (all ranks start equal)."""
    if not is_distributed():
        return
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.data, src=0)


def broadcast_object(obj: T) -> T:
    """Rank 0's ``obj`` on every rank (picklable objects)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_lists(items: list[T]) -> list[T]:
    """Every rank's list concatenated in rank order (rank 0's items first), on every rank."""
    if not is_distributed():
        return list(items)
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, items)
    return [x for part in out for x in part]


def _is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def _collective_device() -> torch.device:
    """Where small bookkeeping tensors live for a collective: the GPU under nccl, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
