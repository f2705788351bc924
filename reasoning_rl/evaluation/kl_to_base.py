"""Forward KL from the base policy to the current one on a fixed probe: ``kl/base_forward``.

"RL's Razor" (Shenfeld et al., arXiv 2509.04259) finds that how much a fine-tuned model
forgets is predicted by the forward KL from the base policy to the fine-tuned one, measured
on the new task's prompts, and that on-policy RL keeps it small. Here pi_0 is the policy as
RL starts (after the optional warm start) and pi the policy at step s:

    KL(pi_0 || pi) = E_{x ~ probe, y ~ pi_0(.|x)} [ sum_t log pi_0(y_t | x, y_<t) - log pi(y_t | x, y_<t) ]

The expectation is under pi_0, so the probe's completions are sampled once from pi_0 when RL
starts and reused at every measurement; their log-probs under pi_0 are computed at that moment
and stored. Each measurement is then one no-grad forward of pi over the stored sequences,
and no copy of pi_0 is kept. The logged value is per token, averaged over every token of
the probe (sum over completions of the sum above, divided by their total token count):

    kl/base_forward = sum_{i, t} (log pi_0(y_{i,t}) - log pi(y_{i,t})) / sum_i |y_i|

an unbiased estimate of the per-token KL for the fixed samples' prompts (exactly 0 at the
start; it can come out slightly negative by sampling noise when pi is close to pi_0).
Log-probs are those of the sampling distribution: logits divided by the rollout temperature
(and top-k / top-p applied), as in the loss.

The probe is saved to the run folder (``kl_base_probe.json``) so that a resumed run measures
against the same pi_0 and the same samples.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reasoning_rl.policy.loading import set_training
from reasoning_rl.policy.logprobs import frozen_logprobs
from reasoning_rl.rollouts.sampling import RolloutEngine, SamplingConfig
from reasoning_rl.run_folder.atomic import atomic_write_text


@dataclass
class BaseProbe:
    """Sequences sampled from pi_0 and their per-token log-probs under pi_0."""

    prompts: list[list[int]]
    """Prompt token ids, one per completion (a prompt repeats once per sample)."""
    completions: list[list[int]]
    """Completion token ids y ~ pi_0."""
    base_logprobs: list[list[float]]
    """log pi_0(y_t | x, y_<t) of each completion token."""

    @property
    def num_tokens(self) -> int:
        return sum(len(c) for c in self.completions)

    def save(self, path: Path) -> None:
        atomic_write_text(Path(path), json.dumps({"prompts": self.prompts, "completions": self.completions,
                                                  "base_logprobs": self.base_logprobs}))

    @classmethod
    def load(cls, path: Path) -> BaseProbe:
        data = json.loads(Path(path).read_text())
        return cls(data["prompts"], data["completions"], data["base_logprobs"])


def sample_probe(model: Any, engine: RolloutEngine, prompts: Sequence[str], num_prompts: int, samples: int,
                 sampling: SamplingConfig, pad_token_id: int, seed: int, micro_batch: int = 16) -> BaseProbe:
    """Draw ``num_prompts`` of ``prompts`` (seeded), sample ``samples`` completions of each from
    ``model`` (pi_0, through ``engine``) and record their log-probs under it."""
    chosen = random.Random(seed).sample(list(prompts), min(num_prompts, len(prompts)))
    groups = engine.generate(chosen, samples, sampling, seed=seed)
    flat = [c for group in groups for c in group]
    probe = BaseProbe([list(c.prompt_token_ids) for c in flat], [list(c.token_ids) for c in flat], [])
    probe.base_logprobs = [row.tolist() for row in _logprobs(model, probe, pad_token_id, sampling, micro_batch)]
    return probe


def forward_kl(model: Any, probe: BaseProbe, pad_token_id: int, sampling: SamplingConfig,
               micro_batch: int = 16) -> float:
    """Per-token KL(pi_0 || model) on the probe: mean over its tokens of log pi_0(y_t) - log pi(y_t)."""
    if probe.num_tokens == 0:
        return float("nan")
    current = _logprobs(model, probe, pad_token_id, sampling, micro_batch)
    diff = sum(float((torch.tensor(base) - now).sum()) for base, now in zip(probe.base_logprobs, current))
    return diff / probe.num_tokens


def _logprobs(model: Any, probe: BaseProbe, pad_token_id: int, sampling: SamplingConfig,
              micro_batch: int) -> list[torch.Tensor]:
    """log pi(y_t) of the probe's tokens, with dropout off (the policy is in training mode between steps)."""
    was_training = model.training
    set_training(model, False)
    try:
        return frozen_logprobs(model, probe.prompts, probe.completions, pad_token_id, sampling.temperature,
                               micro_batch, top_k=sampling.top_k, top_p=sampling.top_p)
    finally:
        set_training(model, was_training)
