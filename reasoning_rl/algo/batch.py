"""The batch every sampling algorithm builds the same way, between the prompt sampler and its loss.

GRPO, PPO, Online RFT and the offline set of RFT and DPO (``reasoning_rl.algo.offline``)
all do, for training step ``s``:

    seed         <- trainer.seed * 1_000_003 + s        (:func:`step_seed`)
    prompts      <- the sampler's next prompts_per_step  (:func:`sample_step`)
    completions  <- group_size samples per prompt, scored by the task's reward
    rows         <- (prompt ids, completion ids), an empty completion trained as its EOS
                                                         (:func:`training_rows`)
    log-probs    <- under the distribution the engine sampled from: the same top-k / top-p
                                                         (:func:`sampled_support`)
    passes       <- micro_batch_size rows a forward/backward pass, any count (:func:`micro_batching`)

Each rule lives here once, so the algorithms cannot drift apart: an offline slot ``s`` is
sampled exactly like an online algorithm's step ``s`` (same prompts, same seed), which is what
makes DeepSeekMath's "same number of sampled completions" comparison (arXiv 2402.03300,
sec. 5.2.1) a comparison of algorithms and not of data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from reasoning_rl.algo.groups import ScoredGroups, sample_and_score
from reasoning_rl.policy.logprobs import frozen_logprobs
from reasoning_rl.policy.precision import MixedPrecision

if TYPE_CHECKING:
    from reasoning_rl.algo.base import RunContext

STEP_SEED_STRIDE = 1_000_003
"""A prime: the seeds of two runs whose trainer.seed differs never meet within a million steps."""


def step_seed(trainer_seed: int, step: int) -> int:
    """The sampling seed of training step ``step`` (0-based) of a run seeded ``trainer_seed``."""
    return trainer_seed * STEP_SEED_STRIDE + step


def sample_step(ctx: RunContext, prompts: int, group_size: int, seed: int) -> tuple[list[int], ScoredGroups]:
    """The sampler's next ``prompts`` training examples (this rank's share of them when
    data-parallel) and ``group_size`` scored samples of each: (example indices, groups)."""
    indices = ctx.sampler.next(prompts)
    return indices, sample_and_score(ctx, [ctx.train_examples[i] for i in indices], group_size, seed=seed)


def trained_tokens(token_ids: Sequence[int], eos_token_id: int, loss_mask: Sequence[int] | None = None) -> list[int]:
    """The token ids a sampled completion is trained as. An empty completion (the engine stopped
    at once, or a stop string cut everything) is trained as its EOS: a row needs at least one
    token for its log-prob, and EOS is what the policy emitted. With a ``loss_mask`` (a multi-turn
    episode: 0 on observation tokens) the row is a :class:`MaskedTokens` carrying it."""
    if not token_ids:
        return [eos_token_id]
    return MaskedTokens(token_ids, loss_mask) if loss_mask is not None else list(token_ids)


class MaskedTokens(list):
    """Token ids with a 0/1 ``loss_mask`` (``Completion.loss_mask``): ``pack`` puts it in the
    completion mask, so the loss and every per-token statistic leave the 0 tokens out."""

    def __init__(self, token_ids: Sequence[int], loss_mask: Sequence[int]) -> None:
        if len(loss_mask) != len(token_ids):
            raise ValueError(f"loss_mask has {len(loss_mask)} entries for {len(token_ids)} tokens")
        super().__init__(token_ids)
        self.loss_mask = [int(m) for m in loss_mask]


@dataclass
class TrainingRows:
    """The token rows of a batch of sampled completions, in the batch's order."""

    prompts: list[list[int]]
    completions: list[list[int]]
    """As trained on (:func:`trained_tokens`)."""

    def __len__(self) -> int:
        return len(self.completions)

    def subset(self, rows: Sequence[int]) -> TrainingRows:
        """The rows ``rows`` (indices into this batch), in that order."""
        return TrainingRows([self.prompts[i] for i in rows], [self.completions[i] for i in rows])

    def lengths(self) -> list[int]:
        """Completion tokens of each row the loss trains on (observation tokens left out), what the
        loss's denominators count."""
        return [sum(c.loss_mask) if isinstance(c, MaskedTokens) else len(c) for c in self.completions]


def training_rows(groups: ScoredGroups, eos_token_id: int) -> TrainingRows:
    """The (prompt, completion) token rows of ``groups``' samples, prompt-major like the groups."""
    return TrainingRows([list(c.prompt_token_ids) for c in groups.completions],
                        [trained_tokens(c.token_ids, eos_token_id, getattr(c, "loss_mask", None))
                         for c in groups.completions])


def rows_with_gradient(advantages: torch.Tensor, group_size: int) -> list[int]:
    """The rows of the groups whose advantages are not all exactly 0, in batch order (``advantages``: [B*G]).

    Every policy objective here is the advantage times a function of the ratio (clip, CISPO, GMPO; an
    off-policy correction or an entropy control that only masks tokens multiplies it), so with no other
    term in the loss (algo.kl.beta = 0, no KL-Cov penalty) a row with A_i = 0 has loss 0 and gradient
    exactly 0: its forward and backward passes add nothing to the step's gradient. A group whose G rewards
    are equal has A_i = 0 for every i under the group-relative estimators (GRPO, Dr. GRPO, RLOO), and on a
    sparse reward most groups are such (docs/real_model.md: ~80%). Whole groups are kept or left out, so
    the rows that share a prompt stay together for the shared-prompt forward."""
    keep = (advantages.reshape(-1, group_size) != 0).any(dim=1)  # [B]; NaN != 0: kept
    return [g * group_size + j for g in keep.nonzero().flatten().tolist() for j in range(group_size)]


def sampled_support(sampling: Any) -> dict[str, Any]:
    """The ``top_k`` / ``top_p`` the engine sampled with (a ``SamplingConfig``), as keyword arguments of
    the log-prob functions (``reasoning_rl.policy.logprobs``): the ratio and the KL must be taken under
    the distribution the tokens were drawn from, renormalised over the same support."""
    return {"top_k": sampling.top_k, "top_p": sampling.top_p}


@dataclass(frozen=True)
class MicroBatching:
    """How one step's rows go through the model: ``rows`` a forward/backward pass."""

    rows: int
    """Rows a micro-batch (the last one may hold fewer)."""
    shared_rows: int
    """Consecutive rows that share one prompt in the shared-prompt forward (1: every row runs
    prompt + completion in full)."""
    note: str | None = None
    """Why the shared-prompt forward encodes a prompt more than once a group, or steps aside."""


def micro_batching(micro_batch_size: int, group_size: int, shared_prompt_forward: bool) -> MicroBatching:
    """Micro-batches of any row count, smaller than a group included.

    The advantages are computed over whole groups before the batch is split (the rollout), and
    every loss denominator is the whole batch's (``LossNormalizer.for_batch``), so a micro-batch
    may cut a group anywhere: the micro-batch losses still add up to the batch loss, and their
    gradients to its gradient.

    The shared-prompt forward needs rows ``i*d .. i*d+d-1`` to share a prompt. Micro-batches start
    at multiples of m = ``micro_batch_size`` and groups at multiples of G; with d = gcd(m, G), every
    d-row block of a micro-batch starts at a multiple of d and, d dividing G, lies inside one group.
    So the forward encodes each prompt once per d rows: once per group when m is a multiple of G,
    and not at all when gcd(m, G) = 1 (it steps aside; ``note`` says why)."""
    m, g = micro_batch_size, group_size
    if not shared_prompt_forward or g == 1:
        return MicroBatching(m, 1)
    d = math.gcd(m, g)
    if d == 1:
        return MicroBatching(m, 1, f"the shared-prompt forward steps aside: algo.micro_batch_size={m} and "
                                   f"algo.group_size={g} have no common factor, so no block of rows in a "
                                   f"micro-batch is sure to share a prompt and every row runs prompt + "
                                   f"completion; a micro_batch_size that is a multiple of {g} encodes each "
                                   f"prompt once per group")
    if d < g:
        return MicroBatching(m, d, f"the shared-prompt forward encodes each prompt once per {d} rows, not once "
                                   f"per group of {g}: algo.micro_batch_size={m} cuts groups (gcd({m}, {g}) "
                                   f"= {d}); a multiple of {g} encodes it once per group")
    return MicroBatching(m, g)


# -- reference log-probs of a step's completions, computed outside the update ------------------------
@dataclass
class ReferenceJob:
    """The frozen reference pi_ref and how the algorithm's update computes the log-probs of a step's
    completions under it (:func:`~reasoning_rl.policy.logprobs.frozen_logprobs` over the step's rows, in the
    update's micro-batches and autocast): the generator computes them the same way for its completions."""

    model: Any
    """pi_ref, frozen for the whole run (its tensors reach the generator in shared memory, not copied)."""
    micro_batch: int
    """Rows a forward pass: the update's ``algo.micro_batch_size``."""
    shared_rows: int
    """Consecutive rows that share one prompt in that forward (reasoning_rl.algo.batch.micro_batching)."""
    precision: str
    """``trainer.precision``: the autocast the update computes them under."""
    eos_token_id: int
    """An empty completion is trained as its EOS (reasoning_rl.algo.batch.trained_tokens)."""
    pad_token_id: int

    def logprobs(self, completions: Sequence[Any], sampling: Any) -> list[list[float]]:
        """log pi_ref of every trained token of ``completions`` (one list per completion, in order)."""
        rows = [trained_tokens(c.token_ids, self.eos_token_id, c.loss_mask) for c in completions]
        prompts = [list(c.prompt_token_ids) for c in completions]
        device_type = next(self.model.parameters()).device.type
        with MixedPrecision(self.precision, device_type).autocast():
            out = frozen_logprobs(self.model, prompts, rows, self.pad_token_id, sampling.temperature,
                                  self.micro_batch, self.shared_rows, **sampled_support(sampling))
        return [row.tolist() for row in out]


def reference_rows(completions: Sequence[Any], trained: Sequence[Sequence[int]]) -> list[torch.Tensor] | None:
    """The generator's pi_ref log-probs of each completion's trained tokens (``Completion.ref_logprobs``),
    one ``[len]`` float32 row each, as ``frozen_logprobs`` returns them; None unless every completion
    carries one per trained token (the update then runs the reference forward itself)."""
    lps = [getattr(c, "ref_logprobs", None) for c in completions]
    if not lps or any(lp is None or len(lp) != len(t) for lp, t in zip(lps, trained, strict=True)):
        return None
    return [torch.tensor(lp, dtype=torch.float32) for lp in lps]
