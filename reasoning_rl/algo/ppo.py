"""PPO with a critic (Schulman et al. 2017, arXiv 1707.06347; GAE, arXiv 1506.02438) as an
algorithm of the shared run loop, in the form of DeepSeekMath's PPO baseline (arXiv 2402.03300,
sec. 4.1: per-token KL penalty in the reward, a value model trained alongside the policy).

One step, read top to bottom:

    prompts      <- next prompts_per_step prompts of the task
    completions  <- group_size samples per prompt from pi_old (1, as in the paper's PPO)
    scores       <- verifiers (worker processes, hard timeouts); NaN = cannot score
    old, ref, V  <- log-probs under pi_old and pi_ref, values V_old(s_t) from the critic
    rewards      <- -beta * (log pi_old - log pi_ref) on every token, + score on the last one
    A, R         <- GAE(gamma, lam) along each completion; A whitened over the batch
    repeat num_iterations times: one AdamW step of policy and critic on
                 -clipped surrogate (per-token A) + vf_coef * clipped value loss

The formulas are pure functions in ``reasoning_rl.algo.gae`` (rewards, GAE, value loss) and
``reasoning_rl.algo.losses`` (ratio, clipped surrogate, aggregation and its normalisation).

With ``task.env`` every completion is a multi-turn episode whose observation tokens (loss mask 0)
the environment wrote: they are not actions. GAE runs over the action positions alone (the
observation is inside the transition from a turn's last action to the next turn's first), the
score goes on the last action, and the policy loss, the value loss, the whitening and the loss
denominators count actions only (:func:`action_mask`).

Departures from the papers, on purpose (docs/ppo.md):
- each of the num_iterations epochs is one optimiser step over the whole batch (gradient
  accumulation over micro-batches), as GRPO's mu; there are no shuffled mini-batches;
- an unscorable completion (NaN reward) gets advantage 0 on every token and is left out of
  the value loss; it still counts in the policy loss's denominators (as in GRPO);
- the critic's scalar head starts at 0 (V = 0 everywhere), so the first advantages are the
  rewards-to-go; the reference model is the policy at the start of RL, never refreshed;
- the policy's forward passes run prompt + completion in full (no shared-prompt cache):
  the critic needs the prompt's hidden states of every row anyway.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from reasoning_rl import distributed
from reasoning_rl.algo.aggregation import LossNormalizer, aggregate, masked_fill_padding, masked_sum
from reasoning_rl.algo.base import Algorithm, ClippedPolicyConfig, StepOutput
from reasoning_rl.algo.batch import TrainingRows, sample_step, sampled_support, step_seed, training_rows
from reasoning_rl.algo.corrections import correct_tokens
from reasoning_rl.algo.gae import (
    clipped_value_loss,
    explained_variance,
    gae_advantages,
    kl_penalized_rewards,
    whiten,
)
from reasoning_rl.algo.groups import ScoredGroups, completion_rows, rollout_metrics
from reasoning_rl.algo.losses import kl_k1, kl_k3
from reasoning_rl.algo.mismatch import MismatchStats, behaviour_rows, staleness_metrics
from reasoning_rl.algo.optim import build_optimizer, clip_and_measure
from reasoning_rl.algo.policy_objectives import clipped_surrogate, clipped_tokens, policy_ratio
from reasoning_rl.algo.reference import frozen_reference
from reasoning_rl.algo.registry import register_algorithm
from reasoning_rl.algo.token_stats import TokenStats
from reasoning_rl.batching import PackedBatch, pack
from reasoning_rl.policy.loading import set_training
from reasoning_rl.policy.logprobs import completion_logprobs, frozen_logprobs, pad_rows
from reasoning_rl.rollouts.sampling import Request
from reasoning_rl.settings.algo import Capabilities

if TYPE_CHECKING:
    from reasoning_rl.tasks import Example

CRITIC_BACKBONES: dict[str, Callable[[Any], Any]] = {
    # Its own copy of the policy's transformer, trained by the value loss alone (DeepSeekMath's PPO).
    "separate": lambda policy: copy.deepcopy(policy.base_model),
    # The policy's own transformer: both losses train it; only the head is added.
    "value_head": lambda policy: policy.base_model,
}
"""``algo.critic`` -> the backbone under the critic's scalar head, from the policy (a causal LM)."""


@dataclass
class PPOConfig(ClippedPolicyConfig):
    """PPO with a critic (``conf/algo/ppo.yaml``)."""

    name: str = "ppo"
    capabilities: ClassVar[Capabilities] = Capabilities(
        samples_groups=True, async_rollouts=True,
        fsdp_blocker="its critic (a second trained model with its own optimiser) is not sharded yet")
    variant: str = "ppo"
    prompts_per_step: int = 64
    """Distinct prompts per optimisation step (64 x 1 sample: the completions of GRPO's 8 x 8)."""
    group_size: int = 1
    """Completions sampled per prompt (1 in the paper's PPO; each is its own episode)."""
    gamma: float = 1.0
    """Discount over completion tokens (1 = the verifier's reward counts fully at every token)."""
    lam: float = 0.95
    """GAE's lambda: 1 = Monte Carlo returns minus V, 0 = one-step TD error."""
    value_clip: float = 0.2
    """c in clip(V, V_old - c, V_old + c) of the value loss (a large value switches clipping off)."""
    vf_coef: float = 0.5
    """Weight of the value loss in the loss that is minimised (with a separate critic it only scales
    the critic's gradient, before clipping)."""
    critic: str = "separate"
    """separate (a copy of the policy's transformer + a scalar head, initialised from the policy) or
    value_head (a scalar head on the policy's own last hidden state, sharing its transformer)."""
    critic_learning_rate: float | None = None
    """AdamW learning rate of the critic's own parameters (null = algo.learning_rate)."""
    whiten_advantages: bool = True
    """Normalise the advantages to mean 0, std 1 over the batch's scorable tokens."""

    def problems(self) -> list[str]:
        out = super().problems()
        if self.group_size < 1:
            out.append(f"algo.group_size must be >= 1, got {self.group_size}")
        if not (0 <= self.gamma <= 1) or not (0 <= self.lam <= 1):
            out.append(f"need 0 <= algo.gamma <= 1 and 0 <= algo.lam <= 1, got {self.gamma}, {self.lam}")
        if self.value_clip <= 0:
            out.append(f"algo.value_clip must be > 0, got {self.value_clip}")
        if self.vf_coef < 0:
            out.append(f"algo.vf_coef must be >= 0, got {self.vf_coef}")
        if self.critic not in CRITIC_BACKBONES:
            out.append(f"algo.critic={self.critic!r} is unknown; choose one of {', '.join(CRITIC_BACKBONES)}")
        if self.critic_learning_rate is not None and self.critic_learning_rate < 0:
            out.append(f"algo.critic_learning_rate must be >= 0, got {self.critic_learning_rate}")
        return out


class ValueModel(torch.nn.Module):
    """The critic: V(s_t) = w . h_t + b on the last hidden state h_t of a causal LM's transformer.

    The head is float32 whatever the backbone's dtype, and starts at 0. ``owns_backbone`` is
    False when the backbone is the policy's own (``value_head``): its parameters then belong
    to the policy's optimiser and checkpoint, and the critic's are the head's alone.
    """

    def __init__(self, backbone: Any, hidden_size: int, owns_backbone: bool) -> None:
        super().__init__()
        self.backbone = backbone
        self.owns_backbone = owns_backbone
        self.head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def own_parameters(self) -> list[torch.nn.Parameter]:
        """What the critic's optimiser trains."""
        return list(self.parameters() if self.owns_backbone else self.head.parameters())

    def own_state_dict(self) -> dict[str, torch.Tensor]:
        """What a checkpoint must hold to restore the critic (the policy is saved by the run loop)."""
        return self.state_dict() if self.owns_backbone else self.head.state_dict()

    def load_own_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        (self if self.owns_backbone else self.head).load_state_dict(state)

    def forward(self, packed: PackedBatch) -> torch.Tensor:
        """V(s_t) for every completion token t of ``packed``, 0 on padding.  # [B, L]"""
        position_ids = (packed.attention_mask.cumsum(-1) - 1).clamp(min=0)  # as in completion_logprobs
        hidden = self.backbone(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                               position_ids=position_ids, use_cache=False).last_hidden_state  # [B, P+L, H]
        # s_t = (prompt, o_<t) ends at position P - 1 + t: the position whose logits predict o_t.
        states = hidden[:, packed.completion_start - 1:-1, :]  # [B, L, H]
        values = self.head(states.float()).squeeze(-1)  # [B, L]
        return masked_fill_padding(values, packed.completion_mask)


def build_critic(policy: Any, kind: str) -> ValueModel:
    """The critic of kind ``kind`` (:data:`CRITIC_BACKBONES`) for ``policy``, on its device."""
    backbone = CRITIC_BACKBONES[kind](policy)
    critic = ValueModel(backbone, policy.config.get_text_config().hidden_size,
                        owns_backbone=backbone is not policy.base_model)
    return critic.to(next(policy.parameters()).device)


def action_mask(completions: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """1 on each completion's actions (its sampled tokens), 0 on padding and on the observation tokens
    of a multi-turn episode (a row's ``loss_mask``: reasoning_rl.algo.batch.MaskedTokens).  # [N, width]

    GAE, the value loss, the whitening and the token statistics run over these positions alone
    (reasoning_rl.algo.gae); the policy loss reads the same mask from ``pack``."""
    return pad_rows([torch.tensor(getattr(c, "loss_mask", None) or [1] * len(c), dtype=torch.float32)
                     for c in completions], width)


@torch.no_grad()
def frozen_values(critic: ValueModel, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                  pad_token_id: int, micro_batch: int) -> list[torch.Tensor]:
    """V_old(s_t) of each completion's tokens, one 1-D float32 CPU tensor per completion."""
    out: list[torch.Tensor] = []
    device = next(critic.parameters()).device
    for s in range(0, len(prompts), micro_batch):
        values = critic(pack(prompts[s:s + micro_batch], completions[s:s + micro_batch], pad_token_id).to(device))
        out += [row[: len(c)].cpu() for row, c in zip(values, completions[s:s + micro_batch])]
    return out


@dataclass
class PPORollouts:
    """One PPO step's samples and everything the update reads, padded to ``[N, L]``
    (N = completions, L = the longest; item i*n + j is completion j of prompt i)."""

    groups: ScoredGroups
    prompts: list[list[int]]
    completions: list[list[int]]
    """Token ids as trained on (an empty completion is its EOS)."""
    mask: torch.Tensor  # [N, L] 1 on completion tokens the policy sampled (an episode's observations: 0)
    value_mask: torch.Tensor  # [N, L] mask of the scorable completions: the value loss's tokens
    old_logp: torch.Tensor  # [N, L] log pi_old
    old_values: torch.Tensor  # [N, L] V_old(s_t)
    advantages: torch.Tensor  # [N, L] GAE, whitened when asked; 0 for unscorable completions
    returns: torch.Tensor  # [N, L] lambda-returns R_t = A_t + V_old(s_t) (before whitening)
    kl_k1: float
    """Token mean of log pi_old - log pi_ref: what the reward penalises (0 with beta = 0)."""
    kl_k3: float
    """Token mean of k3(pi_old || pi_ref), comparable to GRPO's kl/mean."""

    def sequence_advantages(self) -> torch.Tensor:
        """Each completion's mean per-token advantage (for completions.jsonl).  # [N]"""
        return masked_sum(self.advantages, self.mask, dim=-1) / self.mask.sum(-1).clamp(min=1)


@register_algorithm("ppo", PPOConfig)
class PPO(Algorithm):
    label = "PPO"
    cfg: PPOConfig

    def setup(self, state: dict[str, Any] | None) -> None:
        """pi_ref (only when beta > 0), the critic, and AdamW + schedule for policy and critic."""
        a, ctx = self.cfg, self.ctx
        self.ref_model = frozen_reference(ctx) if a.uses_reference() else None
        self.critic = build_critic(ctx.model, a.critic)
        total = ctx.cfg.trainer.steps * a.num_iterations
        self.optimizer, self.scheduler = build_optimizer(ctx.model.parameters(), a, total)
        critic_lr = a.learning_rate if a.critic_learning_rate is None else a.critic_learning_rate
        self.critic_optimizer, self.critic_scheduler = build_optimizer(
            self.critic.own_parameters(), replace(a, learning_rate=critic_lr), total)
        if state is not None:
            self.critic.load_own_state_dict(state["critic"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
            self.critic_scheduler.load_state_dict(state["critic_scheduler"])

    def held_models(self) -> list[Any]:
        return [*([self.ref_model] if self.ref_model is not None else []), self.critic]

    def optimizers(self) -> list[Any]:
        return [self.optimizer, self.critic_optimizer]

    def state_dict(self) -> dict[str, Any]:
        """Saved in trainer_state.pt of every checkpoint, so the critic matches its policy's step."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "critic": self.critic.own_state_dict(), "critic_optimizer": self.critic_optimizer.state_dict(),
                "critic_scheduler": self.critic_scheduler.state_dict()}

    def step(self, step: int) -> StepOutput:
        t0 = time.perf_counter()
        ro = self.rollout(step)
        t1 = time.perf_counter()
        metrics = self.update(ro)
        t2 = time.perf_counter()
        metrics.update(rollout_metrics(ro.groups, self.ctx.reward.specs[0].key))
        metrics.update(staleness_metrics([c.policy_version for c in ro.groups.completions], step))
        # Token means of the rollouts: over all completion tokens, or the scorable ones (value_mask).
        stats = TokenStats(("kl/mean", "kl/k1_mean", "advantage/abs_mean", "value/mean", "value/return_mean"))
        stats.add_mean("kl/mean", ro.kl_k3, float(ro.mask.sum()))
        stats.add_mean("kl/k1_mean", ro.kl_k1, float(ro.mask.sum()))
        stats.add("advantage/abs_mean", ro.advantages.abs(), ro.value_mask)
        stats.add("value/mean", ro.old_values, ro.mask)
        stats.add("value/return_mean", ro.returns, ro.value_mask)
        metrics.update(stats.means())
        metrics.update({
            "value/explained_variance": explained_variance(ro.old_values, ro.returns, ro.value_mask),
            "time/rollout": t1 - t0, "time/update": t2 - t1,
        })
        rows = completion_rows(ro.groups, ro.sequence_advantages()) if self.ctx.cfg.trainer.log_completions else []
        return StepOutput(metrics, rows)

    def rollout(self, step: int) -> PPORollouts:
        """Sample, score, and compute what the update needs: old log-probs, values, GAE."""
        a, ctx = self.cfg, self.ctx
        _, groups = sample_step(ctx, a.prompts_per_step, a.group_size, step_seed(ctx.cfg.trainer.seed, step))
        rows = training_rows(groups, ctx.tokenizer.eos_token_id)
        prompts, comps = rows.prompts, rows.completions
        pad, temperature, mb = ctx.tokenizer.pad_token_id, ctx.sampling.temperature, a.micro_batch_size
        support = sampled_support(ctx.sampling)
        set_training(ctx.model, False)
        set_training(self.critic, False)
        width = max(len(c) for c in comps)
        old_logp = pad_rows(frozen_logprobs(ctx.model, prompts, comps, pad, temperature, mb, **support), width)
        ref_logp = None if self.ref_model is None else pad_rows(
            frozen_logprobs(self.ref_model, prompts, comps, pad, temperature, mb, **support), width)  # [N, L]
        old_values = pad_rows(frozen_values(self.critic, prompts, comps, pad, mb), width)  # [N, L]
        mask = action_mask(comps, width)  # [N, L] 0 on padding and on an episode's observation tokens
        scores = groups.rewards.reshape(-1)  # [N], NaN = unscorable
        scorable = ~torch.isnan(scores)  # [N]
        value_mask = mask * scorable.unsqueeze(-1)  # [N, L]
        # An unscorable completion's score is read as 0 here only so the arithmetic stays finite:
        # its advantages are zeroed below and its returns are left out of the value loss.
        rewards = kl_penalized_rewards(old_logp, ref_logp, torch.nan_to_num(scores, nan=0.0), mask, a.kl.beta)  # [N, L]
        advantages, returns = gae_advantages(rewards, old_values, mask, a.gamma, a.lam)  # [N, L] each
        if a.whiten_advantages:
            advantages = whiten(advantages, value_mask, sum_over_shards=distributed.sum_floats)  # global batch
        advantages = torch.where(value_mask.bool(), advantages, 0.0)  # [N, L]
        n_tokens = float(mask.sum().clamp(min=1))
        kl1 = kl3 = 0.0
        if ref_logp is not None:
            kl1 = float(masked_sum(kl_k1(old_logp, ref_logp), mask)) / n_tokens
            kl3 = float(masked_sum(kl_k3(old_logp, ref_logp), mask)) / n_tokens
        return PPORollouts(groups, prompts, comps, mask, value_mask, old_logp, old_values, advantages, returns,
                           kl_k1=kl1, kl_k3=kl3)

    def update(self, ro: PPORollouts) -> dict[str, float]:
        """num_iterations optimisation steps of policy and critic over this step's rollouts."""
        a, ctx = self.cfg, self.ctx
        model, critic = ctx.model, self.critic
        temperature, device, mb = ctx.sampling.temperature, ctx.device, a.micro_batch_size
        support = sampled_support(ctx.sampling)
        n = len(ro.completions)
        behaviour = behaviour_rows(ro.groups.completions, ro.completions)  # the sampler's log-probs, or None
        mismatch = MismatchStats()
        # The one place the batch's loss denominators are computed (reasoning_rl.algo.losses): the
        # policy loss over every completion, the value loss over the scorable ones.
        lengths = TrainingRows(ro.prompts, ro.completions).lengths()  # sampled tokens: observations left out
        scorable = ro.value_mask.sum(-1) > 0  # [N]
        norm = LossNormalizer.for_batch(lengths, max_tokens=ctx.sampling.max_new_tokens)
        value_norm = LossNormalizer.for_batch([k for k, ok in zip(lengths, scorable) if ok] or [0],
                                              max_tokens=ctx.sampling.max_new_tokens)
        policy_params, critic_params = list(model.parameters()), critic.own_parameters()
        sums = {k: 0.0 for k in ("loss", "policy", "value", "grad_norm", "critic_grad_norm")}
        # Token means over the mu updates, the micro-batches and the ranks (summed, divided once).
        stats = TokenStats(("clip/low_fraction", "clip/high_fraction", "clip/value_fraction", "ratio/mean",
                            "entropy/mean"))
        set_training(model, True)
        set_training(critic, True)
        for epoch in range(a.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            self.critic_optimizer.zero_grad(set_to_none=True)
            for s in range(0, n, mb):
                e = min(n, s + mb)
                packed = pack(ro.prompts[s:e], ro.completions[s:e], ctx.tokenizer.pad_token_id).to(device)
                logp, entropy = completion_logprobs(model, packed.input_ids, packed.attention_mask,
                                                    packed.completion_start, temperature, with_entropy=True,
                                                    **support)  # [b, L] each
                values = critic(packed)  # [b, L]
                mask = packed.completion_mask  # [b, L]
                width = mask.shape[1]
                old_logp, adv, returns, old_values, value_mask = (
                    t[s:e, :width].to(device)
                    for t in (ro.old_logp, ro.advantages, ro.returns, ro.old_values, ro.value_mask))  # [b, L] each
                ratio = policy_ratio(logp, old_logp)  # [b, L]
                # losses.clipped_surrogate takes one advantage per row; PPO's are per token, so
                # each token goes in as a row of its own.
                surrogate = clipped_surrogate(ratio.reshape(-1, 1), adv.reshape(-1),
                                              a.policy_loss.eps_low, a.policy_loss.eps_high).view_as(ratio)  # [b, L]
                if behaviour is not None:  # decoupled off-policy correction: w(pi_old / mu) (algo.correction)
                    mu_logp = pad_rows(behaviour[s:e], width).to(device)  # [b, L]
                    corr = correct_tokens(a.correction, logp, old_logp, mu_logp, adv, mask)
                    surrogate = surrogate * corr.weight
                    if epoch == 0:
                        mismatch.add(old_logp, mu_logp, mask, corr)
                policy_loss = aggregate(a.loss_aggregation, -surrogate, mask, norm)  # we minimise -J
                value_loss_tokens, value_clipped = clipped_value_loss(values, old_values, returns,
                                                                      a.value_clip)  # [b, L] each
                value_loss = aggregate(a.loss_aggregation, value_loss_tokens, value_mask, value_norm)
                loss = policy_loss + a.vf_coef * value_loss
                loss.backward()  # micro-batch losses add up to the batch loss: no re-weighting
                clip_low, clip_high = clipped_tokens(ratio, adv, a.policy_loss.eps_low, a.policy_loss.eps_high)  # [b, L] each
                stats.add("clip/low_fraction", clip_low, mask)
                stats.add("clip/high_fraction", clip_high, mask)
                stats.add("clip/value_fraction", value_clipped, value_mask)
                stats.add("ratio/mean", ratio, mask)
                stats.add("entropy/mean", entropy, mask)
                sums["loss"] += float(loss.detach())
                sums["policy"] += float(policy_loss.detach())
                sums["value"] += float(value_loss.detach())
            sums["grad_norm"] += clip_and_measure(policy_params, a.max_grad_norm)
            sums["critic_grad_norm"] += clip_and_measure(critic_params, a.max_grad_norm)
            self.optimizer.step()
            self.scheduler.step()
            self.critic_optimizer.step()
            self.critic_scheduler.step()
        mu = a.num_iterations  # every metric is the mean over the mu updates
        return {
            "loss/total": sums["loss"] / mu, "loss/policy": sums["policy"] / mu, "loss/value": sums["value"] / mu,
            **stats.means(),
            "grad/norm": sums["grad_norm"] / mu, "grad/critic_norm": sums["critic_grad_norm"] / mu,
            "lr": self.scheduler.get_last_lr()[0], "lr/critic": self.critic_scheduler.get_last_lr()[0],
            **mismatch.metrics(),
        }


    def next_request(self, step: int, examples: Sequence[Example]) -> Request | None:
        """Step ``step`` samples ``group_size`` completions of each prompt at ``step_seed(seed, step)``
        (:meth:`rollout`)."""
        return Request.of_examples(step, examples, self.cfg.group_size, self.ctx.sampling,
                                   step_seed(self.ctx.cfg.trainer.seed, step))
