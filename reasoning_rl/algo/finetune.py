"""What the likelihood algorithms (SFT, RFT, Online RFT, DPO) share: the policy's optimiser and
schedule, its checkpoint state, and one optimisation step on a weighted log-likelihood.

The weighted step is eq. 5 of DeepSeekMath (arXiv 2402.03300, sec. 5.2.1) with one gradient
coefficient per sequence (:func:`reasoning_rl.algo.likelihood.weighted_nll`). Sequences whose
coefficient is 0 contribute nothing to the gradient, so they are not run through the model;
they still count in the denominator N when the algorithm says so (RFT: every sampled
completion). A step with no non-zero coefficient leaves every gradient None, so AdamW changes no weight
(its momentum alone would move them after a zero gradient); the schedule step is still
taken, so every algorithm's learning rate follows the same curve over the run's steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from reasoning_rl import distributed
from reasoning_rl.algo.aggregation import LossNormalizer
from reasoning_rl.algo.base import Algorithm
from reasoning_rl.algo.batch import TrainingRows
from reasoning_rl.algo.likelihood import weighted_nll
from reasoning_rl.algo.optim import build_optimizer, clip_and_measure
from reasoning_rl.algo.token_stats import TokenStats
from reasoning_rl.batching import pack
from reasoning_rl.policy.loading import set_training
from reasoning_rl.policy.logprobs import completion_logprobs


class LikelihoodAlgorithm(Algorithm):
    """Base of the algorithms whose loss is a (weighted) log-likelihood: one policy, one AdamW."""

    def setup(self, state: dict[str, Any] | None) -> None:
        """AdamW over the policy and the schedule over ``trainer.steps`` updates."""
        self.optimizer, self.scheduler = build_optimizer(self.ctx.model.parameters(), self.cfg,
                                                         self.ctx.cfg.trainer.steps)
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])

    def optimizers(self) -> list[Any]:
        return [self.optimizer]

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def encode_targets(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of target completions as the policy would emit them: the text, then EOS."""
        tok = self.ctx.tokenizer
        return [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]

    def optimizer_step(self, losses_backpropagated: bool) -> dict[str, float]:
        """Clip, step AdamW and the schedule. Without a backpropagated loss every gradient is None,
        and AdamW leaves parameters without a gradient untouched (no momentum-only move)."""
        params = list(self.ctx.model.parameters())
        # Data-parallel: a rank without a loss still joins the gradient sum when another has one.
        losses_backpropagated = distributed.any_rank(losses_backpropagated)
        grad_norm = clip_and_measure(params, self.cfg.max_grad_norm) if losses_backpropagated else 0.0
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad/norm": grad_norm, "lr": self.scheduler.get_last_lr()[0],
                "update/skipped": 0.0 if losses_backpropagated else 1.0}

    def weighted_update(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                        coefficients: torch.Tensor, aggregation: str = "sequence_mean") -> dict[str, float]:
        """One optimiser step on ``weighted_nll`` (``aggregation``: its mean) over these N sequences
        (``coefficients``: ``[N]``).

        Rows with coefficient 0 are skipped (they add nothing) but stay counted in N."""
        ctx, a = self.ctx, self.cfg
        # The one place the batch's denominators are computed (reasoning_rl.algo.losses).
        norm = LossNormalizer.for_batch(TrainingRows(list(prompts), list(completions)).lengths())  # mask-0 tokens out
        rows = [i for i in range(len(completions)) if float(coefficients[i]) != 0.0]
        set_training(ctx.model, True)
        t0 = time.perf_counter()
        loss_total = 0.0
        stats = TokenStats(("nll/token_mean",))  # over the trained rows' tokens, every micro-batch and rank
        for s in range(0, len(rows), a.micro_batch_size):
            idx = rows[s:s + a.micro_batch_size]
            packed = pack([prompts[i] for i in idx], [completions[i] for i in idx],
                          ctx.tokenizer.pad_token_id).to(ctx.device)
            logp, _ = completion_logprobs(ctx.model, packed.input_ids, packed.attention_mask,
                                          packed.completion_start, ctx.sampling.temperature)
            loss = weighted_nll(logp, coefficients[idx].to(logp.device), packed.completion_mask, norm, aggregation)
            loss.backward()  # micro-batch losses add up to the batch loss
            loss_total += float(loss.detach())
            stats.add("nll/token_mean", -logp, packed.completion_mask)
        t1 = time.perf_counter()
        out = self.optimizer_step(losses_backpropagated=bool(rows))
        nll = stats.means()["nll/token_mean"]  # a collective when data-parallel
        out.update({"loss/total": loss_total, "nll/token_mean": 0.0 if math.isnan(nll) else nll,
                    "update/sequences": float(len(rows)), "time/policy": t1 - t0,
                    "time/optimizer": time.perf_counter() - t1})
        return out
