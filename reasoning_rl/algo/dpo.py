"""DPO on verifier-labelled pairs of the initial policy's samples, as an algorithm of the shared
run loop (Rafailov et al. 2023, arXiv 2305.18290; DeepSeekMath, arXiv 2402.03300, sec. 5.2.1).

Data, built once before training (``<run>/dpo_pairs.jsonl``, atomically):

    samples      <- the initial policy's offline set (reasoning_rl.algo.offline): per step,
                    prompts_per_step prompts x group_size completions, scored by the verifier
    pairs        <- within each prompt's group: a correct completion o+ with a verified-wrong o-
                    (seeded shuffle, then zip: min(#correct, #wrong) pairs, at most pairs_per_prompt)
    ref log-probs <- log pi_ref(o+ | q), log pi_ref(o- | q) under pi_ref = the initial policy

One step, read top to bottom:

    z_p   = beta * ( log pi_theta(o+)/pi_ref(o+) - log pi_theta(o-)/pi_ref(o-) )   per pair
    one AdamW step on  -1/P sum_p log sigmoid(z_p)

pi_ref is the initial policy, as in the paper; its log-probs of the pairs are computed once
when the pairs are built, so no reference model is held during training. Unscorable
completions (timeouts, errors) enter no pair: neither correct nor known to be wrong.
Log-probs are of whole completions (sums over tokens), DPO's form, at the sampling temperature.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from reasoning_rl.algo.aggregation import LossNormalizer
from reasoning_rl.algo.base import StepOutput
from reasoning_rl.algo.batch import trained_tokens
from reasoning_rl.algo.finetune import LikelihoodAlgorithm
from reasoning_rl.algo.likelihood import dpo_coefficients, dpo_loss, dpo_margin, sequence_logprob
from reasoning_rl.algo.offline import Group, offline_samples, rank_file
from reasoning_rl.algo.registry import register_algorithm
from reasoning_rl.algo.rft import offline_metrics
from reasoning_rl.batching import pack
from reasoning_rl.policy.loading import set_training
from reasoning_rl.policy.logprobs import completion_logprobs, frozen_logprobs
from reasoning_rl.run_folder.atomic import atomic_write_text
from reasoning_rl.settings.algo import AlgoConfig, Capabilities

PAIRS_FILE = "dpo_pairs.jsonl"


@dataclass
class DPOConfig(AlgoConfig):
    """DPO on (correct, wrong) pairs of the initial policy's samples (``conf/algo/dpo.yaml``)."""

    name: str = "dpo"
    capabilities: ClassVar[Capabilities] = Capabilities(samples_groups=True)
    variant: str = "dpo"
    group_size: int = 8
    """Completions of the initial policy sampled per prompt, from which the pairs are made."""
    beta: float = 0.1
    """DPO's beta: the strength of the implicit KL to pi_ref (larger = stay closer)."""
    pairs_per_prompt: int = 0
    """At most this many pairs per prompt (0 = min(#correct, #wrong))."""

    def problems(self) -> list[str]:
        out = super().problems()
        if self.group_size < 2:
            out.append(f"algo.group_size must be >= 2 (a pair needs two samples), got {self.group_size}")
        if self.beta <= 0:
            out.append(f"algo.beta must be > 0, got {self.beta}")
        if self.pairs_per_prompt < 0:
            out.append(f"algo.pairs_per_prompt must be >= 0, got {self.pairs_per_prompt}")
        return out

    def samples_per_prompt(self) -> int:
        return self.group_size

    def uses_reference(self) -> bool:
        return True  # DPO's margin is measured against pi_ref


@dataclass
class Pair:
    """One preference pair of one prompt, with pi_ref's log-probs of both completions."""

    prompt_token_ids: list[int]
    chosen: list[int]
    rejected: list[int]
    ref_chosen: float = 0.0
    ref_rejected: float = 0.0


def make_pairs(group: Group, rng: random.Random, eos_token_id: int, limit: int = 0) -> list[Pair]:
    """(correct, wrong) pairs of one group: each list shuffled, then zipped (each sample used once);
    ``limit`` > 0 keeps at most that many. Unscorable samples are in neither list; an empty
    completion is its EOS, as trained."""
    chosen = [trained_tokens(x.token_ids, eos_token_id) for x in group.samples if x.correct]
    rejected = [trained_tokens(x.token_ids, eos_token_id) for x in group.samples if x.scorable and not x.correct]
    rng.shuffle(chosen)
    rng.shuffle(rejected)
    pairs = [Pair(group.prompt_token_ids, c, r) for c, r in zip(chosen, rejected)]
    return pairs[:limit] if limit > 0 else pairs


@register_algorithm("dpo", DPOConfig)
class DPO(LikelihoodAlgorithm):
    label = "DPO"
    cfg: DPOConfig

    def setup(self, state: dict[str, Any] | None) -> None:
        super().setup(state)
        ctx = self.ctx
        path = ctx.run_dir / rank_file(PAIRS_FILE)
        self.offline = offline_samples(ctx, self.cfg.prompts_per_step, self.cfg.group_size)
        if ctx.resumed:
            if not path.exists():
                raise FileNotFoundError(f"cannot resume algo=dpo: its pairs {path} are missing; start a new run folder")
            self.pairs = [[Pair(**p) for p in json.loads(line)] for line in path.read_text().splitlines()]
            return
        self.pairs = self._build_pairs()
        atomic_write_text(path, "\n".join(json.dumps([asdict(p) for p in slot]) for slot in self.pairs) + "\n")

    def _build_pairs(self) -> list[list[Pair]]:
        """Every slot's pairs, with pi_ref's (the policy's, now) sequence log-probs of both sides."""
        ctx, eos = self.ctx, self.ctx.tokenizer.eos_token_id
        slots = []
        for s, slot in enumerate(self.offline.slots):
            pairs = []
            for g, group in enumerate(slot):
                rng = random.Random(f"{ctx.cfg.trainer.seed}/{s}/{g}")
                pairs += make_pairs(group, rng, eos, self.cfg.pairs_per_prompt)
            slots.append(pairs)
        flat = [p for slot in slots for p in slot]
        prompts = [p.prompt_token_ids for p in flat for _ in (0, 1)]
        completions = [c for p in flat for c in (p.chosen, p.rejected)]
        set_training(ctx.model, False)
        ref = frozen_logprobs(ctx.model, prompts, completions, ctx.tokenizer.pad_token_id, ctx.sampling.temperature,
                              self.cfg.micro_batch_size) if flat else []
        for i, p in enumerate(flat):
            p.ref_chosen, p.ref_rejected = float(ref[2 * i].sum()), float(ref[2 * i + 1].sum())
        return slots

    def step(self, step: int) -> StepOutput:
        ctx, a = self.ctx, self.cfg
        pairs = self.pairs[step]
        metrics = offline_metrics(self.offline.slots[step])
        # The one place the batch's denominators are computed: here P, the step's pairs.
        norm = LossNormalizer.for_batch([1] * len(pairs))
        set_training(ctx.model, True)
        t0 = time.perf_counter()
        loss_total, margins = 0.0, []
        per_pair = max(1, a.micro_batch_size // 2)  # two sequences per pair
        for s in range(0, len(pairs), per_pair):
            chunk = pairs[s:s + per_pair]
            packed = pack([p.prompt_token_ids for p in chunk for _ in (0, 1)],
                          [c for p in chunk for c in (p.chosen, p.rejected)], ctx.tokenizer.pad_token_id).to(ctx.device)
            logp, _ = completion_logprobs(ctx.model, packed.input_ids, packed.attention_mask,
                                          packed.completion_start, ctx.sampling.temperature)
            seq = sequence_logprob(logp, packed.completion_mask)  # [2m]: chosen, rejected, chosen, ...
            ref = torch.tensor([[p.ref_chosen, p.ref_rejected] for p in chunk], device=seq.device)  # [m, 2]
            margin = dpo_margin(seq[0::2], seq[1::2], ref[:, 0], ref[:, 1], a.beta)  # [m]
            loss = dpo_loss(margin, norm.num_sequences)
            loss.backward()  # micro-batch losses add up to the batch loss
            loss_total += float(loss.detach())
            margins.append(margin.detach())
        t1 = time.perf_counter()
        metrics.update(self.optimizer_step(losses_backpropagated=bool(pairs)))
        z = torch.cat(margins) if margins else torch.zeros(0)
        metrics.update({
            "loss/total": loss_total, "dpo/pairs": float(len(pairs)),
            "dpo/margin_mean": float(z.mean()) if z.numel() else 0.0,
            "dpo/pair_accuracy": float((z > 0).float().mean()) if z.numel() else 0.0,
            "dpo/coefficient_mean": float(dpo_coefficients(z, a.beta).mean()) if z.numel() else 0.0,
            "time/policy": t1 - t0,
        })
        return StepOutput(metrics)

