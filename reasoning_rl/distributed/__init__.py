"""Data-parallel training with ``torch.distributed``: the few collective operations the
shared training code needs, each a no-op in a single process.

How a run becomes data-parallel (launched by ``torchrun --nproc_per_node N`` or
``accelerate launch``, which set RANK / WORLD_SIZE / LOCAL_RANK):

    prompts     every rank draws the same global batch and keeps its shard
                (:meth:`reasoning_rl.rollouts.prompt_sampler.PromptSampler.next`); a group is never split
    samples     each rank generates and scores its shard, seeded by (seed, step, rank) (:func:`rank_seed`)
    loss        the denominators are the GLOBAL batch's (:meth:`LossNormalizer.for_batch`
                all-reduces the counts), so each rank's loss is its share of the global loss
    gradients   summed over ranks before measuring and clipping (:func:`reasoning_rl.algo.optim.clip_and_measure`):
                sum_r grad(loss_r) = grad(sum_r loss_r) = the single-process gradient
    writes      only rank 0 writes the run folder; every rank waits at a barrier around a checkpoint

With ``trainer.fsdp=true`` the models are sharded instead of replicated (PyTorch's FSDP2,
:func:`shard_model`): each rank holds 1/N of every parameter, gradient and AdamW moment; FSDP
all-gathers a decoder layer's parameters for its forward and backward and reduce-scatters its
gradients (summed: the losses are already shares of the global loss), so :func:`all_reduce_gradients`
leaves those gradients alone. Rollouts sample with the full parameters (:func:`full_parameters`);
checkpoints hold full tensors (:func:`full_model_state`, :func:`full_tensors`), the single-process layout.

Three modules, one job each: ``process_group`` (the process group, rank seeds and shards, the
collectives), ``fsdp`` (sharded models) and ``metrics`` (one metrics dict from every rank's); their
names are imported here, so callers write ``distributed.sum_floats(...)`` whichever module holds it.

Nothing here calls ``torch.distributed`` unless a process group is initialised with more than
one rank, so single-process runs behave exactly as before. Collectives must be called by every
rank in the same order; the shared helpers call them once per batch or optimiser step.
"""

from __future__ import annotations

from reasoning_rl.distributed.fsdp import (
    FullParameterEngine,
    decoder_layers,
    fsdp_active,
    full_model_state,
    full_parameters,
    full_tensors,
    is_sharded,
    local_models,
    local_optimizers,
    reshard_optimizer,
    shard_model,
    shard_run,
)
from reasoning_rl.distributed.metrics import (
    MAX_METRICS,
    SUMMED_METRICS,
    TOKEN_WEIGHTED_METRICS,
    combine_metrics,
    metric_reduction,
    reduce_metrics,
)
from reasoning_rl.distributed.process_group import (
    RANK_SEED_STRIDE,
    all_reduce_gradients,
    all_reduce_sum,
    any_rank,
    barrier,
    broadcast_object,
    broadcast_parameters,
    gather_lists,
    init_from_env,
    is_distributed,
    is_main,
    local_device,
    rank,
    rank_seed,
    shard_bounds,
    shutdown,
    sum_floats,
    world_size,
)

__all__ = [
    "MAX_METRICS",
    "RANK_SEED_STRIDE",
    "SUMMED_METRICS",
    "TOKEN_WEIGHTED_METRICS",
    "FullParameterEngine",
    "all_reduce_gradients",
    "all_reduce_sum",
    "any_rank",
    "barrier",
    "broadcast_object",
    "broadcast_parameters",
    "combine_metrics",
    "decoder_layers",
    "fsdp_active",
    "full_model_state",
    "full_parameters",
    "full_tensors",
    "gather_lists",
    "init_from_env",
    "is_distributed",
    "is_main",
    "is_sharded",
    "local_device",
    "local_models",
    "local_optimizers",
    "metric_reduction",
    "rank",
    "rank_seed",
    "reduce_metrics",
    "reshard_optimizer",
    "shard_bounds",
    "shard_model",
    "shard_run",
    "shutdown",
    "sum_floats",
    "world_size",
]
