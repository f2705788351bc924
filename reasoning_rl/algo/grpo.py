"""GRPO (DeepSeekMath, arXiv 2402.03300, Algorithm 1) as an algorithm of the shared run loop.

One step, read top to bottom:

    prompts      <- next prompts_per_step prompts of the task
    completions  <- G samples per prompt from pi_old (the current policy)
    rewards      <- verifiers (worker processes, hard timeouts)
    advantages   <- group-relative estimator over each prompt's G rewards
    old, ref     <- log-probs of the sampled tokens under pi_old and pi_ref
    repeat mu times: one AdamW step on -J(theta) (clipped ratio, k3 KL)

Departures from the paper, on purpose: the reference model is the policy at the
start of RL (after the optional warm start) and is never refreshed; with mu = 1 the
old log-probs equal the current ones (ratio 1, as in TRL/verl), so they are not
recomputed. DAPO, Dr. GRPO and RLOO are settings of this module (``conf/algo/``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import torch

from reasoning_rl import distributed
from reasoning_rl.algo.advantages import zero_std_fraction
from reasoning_rl.algo.aggregation import LossNormalizer
from reasoning_rl.algo.base import Algorithm, StepOutput
from reasoning_rl.algo.batch import (
    ReferenceJob,
    micro_batching,
    reference_rows,
    rows_with_gradient,
    sample_step,
    sampled_support,
    step_seed,
    training_rows,
)
from reasoning_rl.algo.entropy_control import position_deciles
from reasoning_rl.algo.groups import (
    ScoredGroups,
    completion_rows,
    informative_groups,
    rollout_metrics,
    select_groups,
)
from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.algo.losses import grpo_loss
from reasoning_rl.algo.mismatch import MismatchStats, behaviour_rows, staleness_metrics
from reasoning_rl.algo.optim import build_optimizer, step_optimizer, zero_loss
from reasoning_rl.algo.reference import frozen_reference, reset_reference
from reasoning_rl.algo.registry import register_algorithm
from reasoning_rl.algo.token_stats import TokenStats
from reasoning_rl.async_checks import reference_refusal
from reasoning_rl.batching import pack
from reasoning_rl.policy.loading import set_training
from reasoning_rl.policy.logprobs import completion_logprobs, frozen_logprobs, pad_rows
from reasoning_rl.policy.precision import MixedPrecision
from reasoning_rl.rollouts.sampling import Request

if TYPE_CHECKING:
    from reasoning_rl.tasks import Example

log = logging.getLogger(__name__)

DECILE_KEYS = tuple(f"entropy/decile_{d}" for d in range(10))
"""Mean token entropy by position in the completion: decile d holds tokens t with floor(10 t / |o|) = d."""


@dataclass(kw_only=True)
class Rollouts(ScoredGroups):
    """One GRPO step's scored groups and their advantages."""

    advantages: torch.Tensor  # [B * G]

    @classmethod
    def of(cls, groups: ScoredGroups, advantages: torch.Tensor) -> Rollouts:
        return cls(**{f.name: getattr(groups, f.name) for f in fields(groups)}, advantages=advantages)


@register_algorithm("grpo", GRPOConfig)
class GRPO(Algorithm):
    label = "GRPO"
    cfg: GRPOConfig

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._notes_logged: set[str] = set()

    def setup(self, state: dict[str, Any] | None) -> None:
        """pi_ref (only when kl.beta > 0), AdamW and the schedule over steps * mu updates."""
        self.ref_model = frozen_reference(self.ctx) if self.cfg.uses_reference() else None
        total = self.ctx.cfg.trainer.steps * self.cfg.num_iterations
        self.optimizer, self.scheduler = build_optimizer(self.ctx.model.parameters(), self.cfg, total)
        self.precision = MixedPrecision(self.ctx.cfg.trainer.precision, self.ctx.device.type)  # trainer.precision
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.precision.load_state_dict(state.get("precision"))

    def held_models(self) -> list[Any]:
        return [self.ref_model] if self.ref_model is not None else []

    def optimizers(self) -> list[Any]:
        return [self.optimizer]

    def generator_reference(self) -> ReferenceJob | None:
        """pi_ref and how :meth:`update` computes its log-probs, for the asynchronous generator to compute
        them for its completions (reasoning_rl.rollouts.async_engine); None where the rule says the update does
        (reasoning_rl.async_checks.reference_refusal)."""
        if self.ref_model is None or reference_refusal(self.ctx.cfg) is not None:
            return None
        mb, group = self._micro_batch()
        return ReferenceJob(self.ref_model, mb, group, self.ctx.cfg.trainer.precision,
                            self.ctx.tokenizer.eos_token_id, self.ctx.tokenizer.pad_token_id)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "precision": self.precision.state_dict()}

    def step(self, step: int) -> StepOutput:
        every = self.cfg.kl.ref_reset_every
        if self.ref_model is not None and every and step and step % every == 0:
            reset_reference(self.ctx, self.ref_model)  # iterative GRPO: pi_ref <- pi_theta
        t0 = time.perf_counter()
        ro = self.rollout(step)
        t1 = time.perf_counter()
        metrics = self.update(ro)
        t2 = time.perf_counter()
        metrics.update(rollout_metrics(ro, self.ctx.reward.specs[0].key))
        metrics.update(self.dynamic_stats)
        metrics.update(staleness_metrics([c.policy_version for c in ro.completions], step))
        metrics.update({
            "groups/zero_std_fraction": zero_std_fraction(ro.rewards),
            "advantage/abs_mean": float(ro.advantages.abs().mean()),
            "time/rollout": t1 - t0, "time/update": t2 - t1,
            "time/generate": ro.seconds.get("generate", 0.0), "time/reward": ro.seconds.get("reward", 0.0),
        })
        rows = completion_rows(ro, ro.advantages) if self.ctx.cfg.trainer.log_completions else []
        return StepOutput(metrics, rows)

    def rollout(self, step: int) -> Rollouts:
        """Sample G completions per prompt, score them, compute advantages."""
        a, ctx = self.cfg, self.ctx
        seed = step_seed(ctx.cfg.trainer.seed, step)
        _, groups = sample_step(ctx, a.prompts_per_step, a.group_size, seed)
        self.dynamic_stats: dict[str, float] = {}
        if a.dynamic_sampling.enabled:
            groups = self._dynamic_sampling(groups, seed)
        advantages = a.advantage(groups.rewards).reshape(-1)  # [B*G]
        return Rollouts.of(groups, advantages)

    def _dynamic_sampling(self, first: ScoredGroups, seed: int) -> ScoredGroups:
        """DAPO (arXiv 2503.14476, sec. 3.2): keep only groups whose rewards differ; sample more
        prompts (at most ``dynamic_sampling.max_rounds`` rounds) until the batch is full. Steps that
        still fall short train on the informative groups they have."""
        a, ctx = self.cfg, self.ctx
        target = len(first.examples)  # prompts_per_step (this rank's share of it when data-parallel)
        parts = [first]
        keep = [(0, int(g)) for g in informative_groups(first.rewards).nonzero().flatten()]
        rounds = 0
        # One decision for all ranks (any rank short -> every rank samples a round), so every
        # rank's prompt sampler advances alike and the collectives stay in step.
        while rounds < a.dynamic_sampling.max_rounds and distributed.any_rank(len(keep) < target):
            rounds += 1
            _, part = sample_step(ctx, a.prompts_per_step, a.group_size, seed + 7_919 * rounds)
            parts.append(part)
            keep += [(len(parts) - 1, int(g)) for g in informative_groups(part.rewards).nonzero().flatten()]
        keep = keep[:target]
        sampled = sum(len(p.completions) for p in parts)
        if not keep:  # nothing informative at all: train on the first round (zero policy gradient, KL only)
            keep = [(0, g) for g in range(len(first.examples))]
        self.dynamic_stats = {"dynamic/extra_rounds": rounds, "dynamic/groups_kept": len(keep),
                              "dynamic/wasted_rollouts": sampled - len(keep) * a.group_size}
        return select_groups(parts, keep)

    def _micro_batch(self) -> tuple[int, int]:
        """(rows per micro-batch, rows sharing a prompt): ``algo.micro_batch_size`` rows of any count
        (reasoning_rl.algo.batch.micro_batching); why the shared-prompt forward is partial or steps
        aside is logged once."""
        a = self.cfg
        plan = micro_batching(a.micro_batch_size, a.group_size, a.shared_prompt_forward)
        if plan.note is not None and plan.note not in self._notes_logged:
            self._notes_logged.add(plan.note)
            log.info("micro-batches: %s", plan.note)
        return plan.rows, plan.shared_rows

    def update(self, ro: Rollouts) -> dict[str, float]:
        """mu optimisation steps on -J(theta) over this step's rollouts."""
        a, ctx = self.cfg, self.ctx
        model, pad, temperature = ctx.model, ctx.tokenizer.pad_token_id, ctx.sampling.temperature
        support = sampled_support(ctx.sampling)
        rows = training_rows(ro, ctx.tokenizer.eos_token_id)
        # The one place the batch's loss denominators are computed (reasoning_rl.algo.losses): every row
        # counts in them, the ones left out below included.
        norm = LossNormalizer.for_batch(rows.lengths(), max_tokens=ctx.sampling.max_new_tokens)
        completions, advantages = ro.completions, ro.advantages
        if a.skip_zero_advantage_groups:  # rows whose gradient is exactly 0 need no forward or backward pass
            keep = rows_with_gradient(ro.advantages, a.group_size)
            rows, completions, advantages = rows.subset(keep), [completions[i] for i in keep], advantages[keep]
        prompts, comps = rows.prompts, rows.completions
        behaviour = behaviour_rows(completions, comps)  # the sampler's log-probs (None: not reported)
        mismatch = MismatchStats()
        n = len(comps)
        mb, group = self._micro_batch()
        t_start = time.perf_counter()
        if a.num_iterations > 1:
            set_training(model, False)
            with self.precision.autocast():  # pi_old in the training forward's precision
                old = frozen_logprobs(model, prompts, comps, pad, temperature, mb, group, **support)
        else:
            old = None  # mu == 1: pi_old == pi_theta, the ratio is exactly 1 (detached copy below)
        # pi_ref's log-probs: the asynchronous generator's when it computed them (the same rows and micro-batches).
        ref = reference_rows(completions, comps) if self.ref_model is not None else None
        if ref is None and self.ref_model is not None:
            with self.precision.autocast():
                ref = frozen_logprobs(self.ref_model, prompts, comps, pad, temperature, mb, group, **support)
        set_training(model, True)
        seconds = {"logprobs": time.perf_counter() - t_start, "policy": 0.0, "optimizer": 0.0}
        totals = {k: 0.0 for k in ("loss", "policy", "grad_norm")}
        # Token means over the mu updates, the micro-batches and the ranks (summed, divided once).
        token_keys = ("kl/mean", "clip/low_fraction", "clip/high_fraction", "ratio/mean")
        token_keys += ("clip/dual_fraction",) if a.policy_loss.dual_clip_c else ()
        stats = TokenStats((*token_keys, "entropy/mean", *DECILE_KEYS))
        # Cov(log pi, A) over the step's tokens = E[log pi * A] - E[log pi] E[A], from three token means.
        cov = TokenStats(("logp", "adv", "logp_adv"))
        loss_groups = a.loss_groups()
        params = list(model.parameters())
        for epoch in range(a.num_iterations):
            t_policy = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            for s in range(0, n, mb):
                e = min(n, s + mb)
                packed = pack(prompts[s:e], comps[s:e], pad).to(ctx.device)
                with self.precision.autocast():  # trainer.precision; the log-probs come out float32
                    logp, entropy = completion_logprobs(model, packed.input_ids, packed.attention_mask,
                                                        packed.completion_start, temperature,
                                                        with_entropy=True, group_size=group, **support)
                mask = packed.completion_mask  # [b, L]
                old_logp = logp.detach() if old is None else pad_rows(old[s:e], mask.shape[1]).to(ctx.device)
                ref_logp = None if ref is None else pad_rows(ref[s:e], mask.shape[1]).to(ctx.device)
                mu_logp = None if behaviour is None else pad_rows(behaviour[s:e], mask.shape[1]).to(ctx.device)
                out = grpo_loss(logp, old_logp, ref_logp, advantages[s:e].to(ctx.device), mask, loss_groups,
                                normalizer=norm, entropy=entropy, behaviour_logp=mu_logp)
                if mu_logp is not None and epoch == 0:  # the batch's mismatch, counted once
                    mismatch.add(old_logp, mu_logp, mask, out.correction)
                self.precision.backward(out.loss)  # micro-batch losses add up to the batch loss: no re-weighting
                totals["loss"] += float(out.loss.detach())
                totals["policy"] += out.policy_loss
                means = {"kl/mean": out.kl, "clip/low_fraction": out.clip_low_fraction,
                         "clip/high_fraction": out.clip_high_fraction, "ratio/mean": out.ratio_mean,
                         "clip/dual_fraction": out.clip_dual_fraction}
                for key in token_keys:
                    stats.add_mean(key, means[key], out.num_tokens)  # the micro-batch's mean, weighted by its tokens
                stats.add("entropy/mean", entropy, mask)
                deciles = position_deciles(mask)  # [b, L]
                for d, key in enumerate(DECILE_KEYS):
                    stats.add(key, entropy, mask.bool() & (deciles == d))
                adv = advantages[s:e].to(ctx.device).unsqueeze(-1).expand_as(logp)  # [b, L]
                cov.add("logp", logp, mask)
                cov.add("adv", adv, mask)
                cov.add("logp_adv", logp.detach() * adv, mask)
            if n == 0:  # every group left out: AdamW (and fp16's loss scaler) step on a gradient of exactly 0
                self.precision.backward(zero_loss(params))
            t_optimizer = time.perf_counter()
            totals["grad_norm"] += step_optimizer(self.optimizer, params, a.max_grad_norm, self.precision)
            self.scheduler.step()
            seconds["policy"] += t_optimizer - t_policy
            seconds["optimizer"] += time.perf_counter() - t_optimizer
        mu = a.num_iterations  # every metric is the mean over the mu updates
        # Token statistics over the rows the update ran (with skip_zero_advantage_groups, none on a step
        # whose groups all left out); the losses are the whole batch's (a row left out adds exactly 0).
        c = cov.means(seen_only=True)  # a collective when data-parallel, like stats.means()
        return {
            "loss/total": totals["loss"] / mu, "loss/policy": totals["policy"] / mu, **stats.means(seen_only=True),
            **({"cov/logp_advantage": c["logp_adv"] - c["logp"] * c["adv"]} if c else {}),
            **({"update/rows_left_out": float(len(ro.completions) - n)} if a.skip_zero_advantage_groups else {}),
            "grad/norm": totals["grad_norm"] / mu, "lr": self.scheduler.get_last_lr()[0],
            "time/frozen_logprobs": seconds["logprobs"], "time/policy": seconds["policy"],
            "time/optimizer": seconds["optimizer"], **self.precision.metrics(), **mismatch.metrics(),
        }


    def next_request(self, step: int, examples: Sequence[Example]) -> Request | None:
        """Step ``step`` samples ``group_size`` completions of each prompt at ``step_seed(seed, step)``
        (:meth:`rollout`; dynamic sampling's extra rounds are refused with asynchrony)."""
        return Request.of_examples(step, examples, self.cfg.group_size, self.ctx.sampling,
                                   step_seed(self.ctx.cfg.trainer.seed, step))
