"""FSDP2 (``trainer.fsdp=true``): shard a model over the ranks layer by layer, sample with its full
parameters, save full tensors, and point an optimiser at the shards (``reasoning_rl.distributed``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from reasoning_rl.distributed.process_group import _is_dtensor, is_distributed, is_main

T = TypeVar("T")


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


def fsdp_active(cfg: Any) -> bool:
    """Whether this run shards its models: ``trainer.fsdp=true`` on several ranks (in one process there
    is nothing to shard and the model stays whole)."""
    return bool(cfg.trainer.fsdp) and is_distributed()


def shard_run(models: list[torch.nn.Module], optimizers: Iterable[torch.optim.Optimizer]) -> None:
    """Shard the run's whole ``models`` (the policy first, then the models the algorithm holds: the
    reference) over the ranks, layer by layer (:func:`shard_model`), and point each of ``optimizers`` at
    the sharded parameters; each keeps its slice of its state (:func:`reshard_optimizer`).

    Done after the algorithm's setup, on whole models: the reference is copied and saved, the optimiser
    built and a checkpoint's optimiser state loaded exactly as in a single process."""
    before = {id(p): (i, name) for i, m in enumerate(models) for name, p in m.named_parameters()}
    for model in models:
        shard_model(model)
    after = {(i, name): p for i, m in enumerate(models) for name, p in m.named_parameters()}
    successors = {pid: after[key] for pid, key in before.items()}
    for optimizer in optimizers:
        reshard_optimizer(optimizer, successors)


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

    def close(self) -> None:
        """Nothing of its own to release (the rollout stack closes the layer below)."""

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
