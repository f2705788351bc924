"""Data-parallel training with ``torch.distributed``: the few collective operations the
shared training code needs, each a no-op in a single process.

How a run becomes data-parallel (launched by ``torchrun --nproc_per_node N`` or
``accelerate launch``, which set RANK / WORLD_SIZE / LOCAL_RANK):

    prompts     every rank draws the same global batch and keeps its shard
                (:meth:`reasoning_rl.prompt_sampler.PromptSampler.next`); a group is never split
    samples     each rank generates and scores its shard, seeded by (seed, step, rank) (:func:`rank_seed`)
    loss        the denominators are the GLOBAL batch's (:meth:`LossNormalizer.for_batch`
                all-reduces the counts), so each rank's loss is its share of the global loss
    gradients   summed over ranks before measuring and clipping (:func:`reasoning_rl.optim.clip_and_measure`):
                sum_r grad(loss_r) = grad(sum_r loss_r) = the single-process gradient
    writes      only rank 0 writes the run folder; every rank waits at a barrier around a checkpoint

With ``trainer.fsdp=true`` the models are sharded instead of replicated (PyTorch's FSDP2,
:func:`shard_model`): each rank holds 1/N of every parameter, gradient and AdamW moment; FSDP
all-gathers a decoder layer's parameters for its forward and backward and reduce-scatters its
gradients (summed: the losses are already shares of the global loss), so :func:`all_reduce_gradients`
leaves those gradients alone. Rollouts sample with the full parameters (:func:`full_parameters`);
checkpoints hold full tensors (:func:`full_model_state`, :func:`full_tensors`), the single-process layout.

Nothing here calls ``torch.distributed`` unless a process group is initialised with more than
one rank, so single-process runs behave exactly as before. Collectives must be called by every
rank in the same order; the shared helpers call them once per batch or optimiser step.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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


# -- FSDP2: sharded models (trainer.fsdp=true) ----------------------------------------------------------

def _is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def is_sharded(model: Any) -> bool:
    """True when ``model`` was sharded by :func:`shard_model` (an FSDP2 module)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's transformer blocks: modules whose class a transformers model names in
    ``_no_split_modules`` (``LlamaDecoderLayer``, ``Qwen2DecoderLayer``, ...), the units FSDP shards."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names and m is not model]
    if not layers:
        raise ValueError(f"trainer.fsdp=true: {type(model).__name__} names no decoder layer class in "
                         "_no_split_modules, so there is nothing to shard layer by layer")
    return layers


def shard_model(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Shard ``model`` in place over all ranks with FSDP2 (``torch.distributed.fsdp.fully_shard``):
    one FSDP unit per decoder layer, then the root (embeddings, final norm, LM head, tied weights
    included). Returns the FSDP units, layers first.

    Each parameter becomes a DTensor holding this rank's 1/N slice (dim 0); forward and backward
    all-gather one layer at a time. A layer frees its gathered parameters after its forward; the
    root keeps them (it runs last in the forward and first in the backward). Gradients are
    reduce-scattered as a SUM (divide factor 1, sum-only collectives, which gloo also has): the
    losses are divided by the global batch's denominators (``LossNormalizer.for_batch``), so the
    sum over ranks is the single-process gradient, exactly as in the replicated path."""
    from torch.distributed.fsdp import fully_shard

    layers = decoder_layers(model)
    for layer in layers:
        fully_shard(layer, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=False)
    units = [*layers, model]
    for unit in units:
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    return units


def _fsdp_units(model: torch.nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


_FULL_DEPTH: dict[int, int] = {}
"""id(model) -> how many :func:`full_parameters` contexts are open on it (only the outermost acts)."""


@contextmanager
def full_parameters(model: torch.nn.Module) -> Iterator[None]:
    """Inside: every parameter of a sharded ``model`` is gathered (one all-gather per FSDP unit, on
    entry) and stays so; forwards then run no collective at all. Sampling needs this: ranks run
    different numbers of decoding steps (their completions end at different lengths), and a
    per-forward all-gather would wait for ranks that have stopped. On exit the gathered copies
    are freed and the shards are in place again. Every rank must enter (the all-gathers are
    collectives); no backward may run inside. Nested contexts act once; a replicated model: no-op.

    The price: the full parameters are held on each device while sampling (gradients and optimiser
    states stay sharded)."""
    key = id(model)
    if not is_sharded(model) or _FULL_DEPTH.get(key, 0):
        _FULL_DEPTH[key] = _FULL_DEPTH.get(key, 0) + 1
        try:
            yield
        finally:
            _FULL_DEPTH[key] -= 1
            if not _FULL_DEPTH[key]:
                del _FULL_DEPTH[key]
        return
    units = _fsdp_units(model)
    _FULL_DEPTH[key] = 1
    try:
        for unit in units:
            unit.set_reshard_after_forward(False, recurse=False)
            unit.unshard()
        yield
    finally:
        del _FULL_DEPTH[key]
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(unit is not model, recurse=False)  # as shard_model set them


class FullParameterEngine:
    """A rollout engine whose ``generate`` samples a sharded policy with its full parameters
    (:func:`full_parameters` around the inner engine's call); everything else is the inner engine's."""

    def __init__(self, inner: Any, model: torch.nn.Module) -> None:
        self.inner, self.model = inner, model

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with full_parameters(self.model):
            return self.inner.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # policy_version, update_policy, pop_metrics, ...
        return getattr(self.inner, name)


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The full (unsharded) state dict of a sharded ``model``, on the CPU, on rank 0; None on the
    other ranks. A collective: every rank calls it. For a replicated model: None (save it as it is)."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return state if is_main() else None


def full_tensors(tree: T) -> T:
    """``tree`` (nested dicts, lists, tuples) with every DTensor replaced by its full tensor on the
    CPU (rank 0) or None (the other ranks), for a checkpoint in the single-process layout (an
    optimiser state over sharded parameters becomes the replicated one). A collective when the
    tree holds DTensors: every rank calls it with the same structure (walked in its order)."""
    if _is_dtensor(tree):
        full = tree.full_tensor()  # type: ignore[attr-defined]
        return full.cpu() if is_main() else None  # type: ignore[return-value]
    if isinstance(tree, dict):
        return type(tree)((k, full_tensors(v)) for k, v in tree.items())  # type: ignore[return-value]
    if isinstance(tree, (list, tuple)):
        return type(tree)(full_tensors(v) for v in tree)  # type: ignore[return-value]
    return tree


def reshard_optimizer(optimizer: torch.optim.Optimizer, new_params: Mapping[int, torch.nn.Parameter]) -> None:
    """Point ``optimizer`` at the sharded parameters that replaced its own (``new_params``: id of
    the old parameter -> its DTensor successor, from :func:`shard_model`'s model) and slice its
    state (AdamW's moments, full tensors as loaded from a checkpoint or built before sharding) to
    this rank's shard. No communication: every rank holds the same full state and keeps its slice.
    Scalars (the step counters) are kept as they are."""
    from torch.distributed.tensor import distribute_tensor

    for group in optimizer.param_groups:
        for i, old in enumerate(group["params"]):
            new = new_params.get(id(old))
            if new is None:
                raise ValueError("trainer.fsdp=true: the optimiser holds a parameter of no sharded model")
            group["params"][i] = new
            state = optimizer.state.pop(old, None)
            if state is None:
                continue
            optimizer.state[new] = {
                k: distribute_tensor(v.to(new.device), new.device_mesh, new.placements, src_data_rank=None)
                if torch.is_tensor(v) and not _is_dtensor(v) and v.shape == new.shape else v
                for k, v in state.items()
            }


class _LocalView:
    """What :mod:`reasoning_rl.memory` reads of a model or optimiser, with DTensors as their local
    shards (``parameters()``, ``.grad``, ``state``): the bytes this rank holds."""

    def __init__(self, params: list[torch.Tensor], state: dict[Any, dict[str, Any]] | None = None) -> None:
        self._params, self.state = params, state or {}

    def parameters(self) -> Iterator[torch.Tensor]:
        return iter(self._params)


def _local(t: Any) -> Any:
    if not _is_dtensor(t):
        return t
    local = t.to_local().detach()
    if t.grad is not None:
        local.grad = t.grad.to_local() if _is_dtensor(t.grad) else t.grad  # type: ignore[misc]
    return local


def local_models(models: Iterable[Any]) -> list[Any]:
    """Models as this rank holds them (:class:`_LocalView` of sharded ones; others unchanged)."""
    return [_LocalView([_local(p) for p in m.parameters()]) if is_sharded(m) else m for m in models]


def local_optimizers(optimizers: Iterable[torch.optim.Optimizer]) -> list[Any]:
    """Optimisers' states as this rank holds them (a sharded moment counts its local slice)."""
    return [_LocalView([], {k: {n: _local(v) for n, v in s.items()} for k, s in opt.state.items()})
            for opt in optimizers]


# -- metrics: one value per step from every rank's value ---------------------------------------------

SUMMED_METRICS = ("loss/", "completion/tokens", "verifier/", "dynamic/groups_kept", "dynamic/wasted_rollouts")
"""Key prefixes summed over ranks: losses (each rank's is its share of the global batch loss, the
denominators being global) and counts."""
MAX_METRICS = ("time/", "completion/length_max", "rollout/logprob_mismatch_max", "rollout/policy_version")
"""Key prefixes whose maximum over ranks is logged: times (the slowest rank sets the pace), maxima."""
TOKEN_WEIGHTED_METRICS = ("kl/", "clip/", "ratio/", "entropy/", "rollout/logprob_mismatch_mean")
"""Key prefixes that are token means: averaged over ranks weighted by each rank's ``completion/tokens``."""


def metric_reduction(key: str) -> str:
    """How ``key`` is combined over ranks: sum, max, token_mean or mean (the default:
    every rank holds the same number of prompts and samples)."""
    for op, prefixes in (("sum", SUMMED_METRICS), ("max", MAX_METRICS), ("token_mean", TOKEN_WEIGHTED_METRICS)):
        if key.startswith(prefixes):
            return op
    return "mean"


def combine_metrics(per_rank: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One metrics dict from every rank's (pure: see :func:`metric_reduction`). Missing, non-numeric
    and non-finite values are left out of a key's reduction; a key with none left keeps rank 0's value."""
    keys = list(dict.fromkeys(k for m in per_rank for k in m))
    weights = [float(m.get("completion/tokens") or 0.0) for m in per_rank]
    out: dict[str, Any] = {}
    for key in keys:
        pairs = [(m[key], w) for m, w in zip(per_rank, weights) if isinstance(m.get(key), (int, float))
                 and not isinstance(m.get(key), bool) and math.isfinite(m[key])]
        if not pairs:
            out[key] = per_rank[0].get(key)
            continue
        values = [float(v) for v, _ in pairs]
        op = metric_reduction(key)
        integral = all(isinstance(v, int) for v, _ in pairs)  # counts and versions stay integers
        if op == "sum":
            out[key] = int(sum(values)) if integral else sum(values)
        elif op == "max":
            out[key] = int(max(values)) if integral else max(values)
        elif op == "token_mean" and sum(w for _, w in pairs) > 0:
            out[key] = sum(v * w for v, (_, w) in zip(values, pairs)) / sum(w for _, w in pairs)
        else:
            out[key] = sum(values) / len(values)
    return out


def reduce_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The step's metrics over all ranks (:func:`combine_metrics`), on every rank."""
    if not is_distributed():
        return dict(metrics)
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, dict(metrics))
    return combine_metrics(out)


def _collective_device() -> torch.device:
    """Where small bookkeeping tensors live for a collective: the GPU under nccl, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
