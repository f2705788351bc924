"""Supervised warm start: teach the policy the answer format before RL, and stop early on purpose.

GRPO learns only from groups whose rewards differ, so a policy that is never right
gets no signal. A short supervised phase on ``prompt -> reference`` pairs (loss on
the target tokens only) brings it to partial accuracy; it stops as soon as greedy
accuracy on a probe of TRAINING problems reaches ``stop_at_accuracy``, leaving the
rest of the improvement to RL. Held-out problems are never used here.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from reasoning_rl.batching import pack
from reasoning_rl.config import WarmStartConfig
from reasoning_rl.heldout import accuracy_of
from reasoning_rl.policy.logprobs import completion_logprobs
from reasoning_rl.rollout import RolloutEngine, SamplingConfig
from reasoning_rl.tasks import Example

log = logging.getLogger(__name__)


@dataclass
class WarmStartResult:
    steps: int
    probe_accuracy: float
    history: list[dict[str, float]]


def supervised_warm_start(
    model: Any,
    tokenizer: Any,
    engine: RolloutEngine,
    examples: Sequence[Example],
    cfg: WarmStartConfig,
    reward: Any,
    sampling: SamplingConfig,
    seed: int,
    timeout: float,
    pool: Any,
) -> WarmStartResult:
    """Cross-entropy on the reference answers until the probe accuracy reaches the target."""
    rng = random.Random(seed)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    probe = list(examples[: cfg.probe_size])
    encoded = [
        (tokenizer(e.prompt, add_special_tokens=False)["input_ids"],
         tokenizer(f"{e.reference}{cfg.target_suffix}", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
        for e in examples
    ]
    history: list[dict[str, float]] = []
    accuracy = 0.0
    step = 0
    model.train()
    for step in range(1, cfg.max_steps + 1):
        batch = [encoded[rng.randrange(len(encoded))] for _ in range(cfg.batch_size)]
        packed = pack([p for p, _ in batch], [t for _, t in batch], tokenizer.pad_token_id).to(device)
        logp, _ = completion_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_start)
        # Negative log-likelihood of the target tokens, averaged over tokens.  # [B, L] -> scalar
        loss = -(logp * packed.completion_mask).sum() / packed.completion_mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % cfg.check_every == 0 or step == cfg.max_steps:
            greedy = SamplingConfig(max_new_tokens=sampling.max_new_tokens, do_sample=False, stop=sampling.stop)
            accuracy = accuracy_of(engine, probe, reward, greedy, 1, seed, timeout, pool)
            model.train()
            history.append({"step": step, "loss": float(loss.detach()), "probe_accuracy": accuracy})
            log.info("warm start step %d: loss %.3f, probe greedy accuracy %.3f", step, float(loss.detach()), accuracy)
            if accuracy >= cfg.stop_at_accuracy:
                break
    optimizer.zero_grad(set_to_none=True)
    return WarmStartResult(steps=step, probe_accuracy=accuracy, history=history)
