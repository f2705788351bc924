"""Supervised warm start: teach the policy the answer format before RL, and stop early on purpose.

GRPO learns only from groups whose rewards differ, so a policy that is never right
gets no signal. A short supervised phase on ``prompt -> reference`` pairs brings it to
partial accuracy; it stops as soon as greedy accuracy on a probe of TRAINING problems
reaches ``stop_at_accuracy``, leaving the rest of the improvement to RL. Held-out
problems are never used here.

The phase runs the ``sft`` algorithm (``reasoning_rl.algo.sft``: its loss, its optimiser
step) with these settings from ``warmstart.*``:

    targets      each training example's reference + ``target_suffix``, then EOS
                 (``target=solution``: the definition's ``reference_completion`` instead)
    masked       with ``mask_observations``: the tokens of the environment's observations in each
                 target (``Environment.observation_spans``: python_tool's output blocks, code_feedback's
                 feedback lines and retry prompt) get loss mask 0, as in RL's episodes; each piece is
                 tokenized on its own, as the episode runner tokenizes an observation apart from the turns
    batch        ``batch_size`` examples drawn uniformly WITH replacement (seeded by trainer.seed),
                 one forward/backward pass
    loss         the token mean of the targets' negative log-likelihood (``loss_aggregation=token_mean``),
                 over the tokens whose loss mask is 1
    optimiser    AdamW (torch's default kernel), ``learning_rate``, no weight decay, betas (0.9, 0.999),
                 gradient norm clipped at 1, constant rate; dropped when the phase ends (RL builds its own)

Every ``check_every`` steps the probe is sampled greedily and graded by the task's verifier.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reasoning_rl.algo.base import RunContext
from reasoning_rl.algo.batch import MaskedTokens
from reasoning_rl.algo.sft import SFT, SFTConfig
from reasoning_rl.config import TrainConfig
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.envs.registry import get_environment
from reasoning_rl.evaluation.heldout import accuracy_of
from reasoning_rl.reward_guard import RewardGuard
from reasoning_rl.rollouts.sampling import RolloutEngine, SamplingConfig
from reasoning_rl.settings.evaluation import WarmStartConfig
from reasoning_rl.settings.trainer import TrainerConfig
from reasoning_rl.tasks import Example
from reasoning_rl.validation import mask_observations_problem

log = logging.getLogger(__name__)


@dataclass
class WarmStartResult:
    steps: int
    probe_accuracy: float
    history: list[dict[str, float]]


class DrawWithReplacement:
    """The warm start's data order: ``k`` uniform draws with replacement a step, from one seeded
    generator. Every rank draws the same batch (the gradients summed over ranks are then divided
    by the ranks' summed token count, so the update is the single-process one)."""

    def __init__(self, num_examples: int, seed: int) -> None:
        self.num_examples, self.rng = num_examples, random.Random(seed)

    def next(self, k: int) -> list[int]:
        return [self.rng.randrange(self.num_examples) for _ in range(k)]


def warm_start_settings(cfg: WarmStartConfig) -> SFTConfig:
    """The ``sft`` settings of the warm start (module docstring)."""
    return SFTConfig(variant="warmstart", prompts_per_step=cfg.batch_size, micro_batch_size=cfg.batch_size,
                     learning_rate=cfg.learning_rate, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
                     max_grad_norm=1.0, lr_schedule="constant", lr_warmup_steps=0, loss_aggregation="token_mean")


def warm_start_targets(examples: list[Example], cfg: WarmStartConfig) -> list[Example]:
    """The supervised targets: each example's reference + ``target_suffix`` (``warmstart.target=reference``),
    or the definition's rendered ``reference_completion`` (``solution``: a tool task's whole episode)."""
    if cfg.target == "reference":
        return [replace(e, solution=f"{e.reference}{cfg.target_suffix}") for e in examples]
    if cfg.target != "solution":
        raise ValueError(f"warmstart.target must be 'reference' or 'solution', got {cfg.target!r}")
    missing = [e.id for e in examples if e.solution is None]
    if missing:
        raise ValueError(f"warmstart.target=solution: {len(missing)} training rows have no reference_completion "
                         f"(first: {missing[0]!r}); use warmstart.target=reference")
    return [replace(e, solution=f"{e.solution}{cfg.target_suffix}") for e in examples]


Spans = list[tuple[int, int]]
"""``[start, end)`` character spans of a text."""


def masked_target(tokenizer: Any, text: str, observations: Sequence[tuple[int, int]]) -> MaskedTokens:
    """The token ids of ``text`` then EOS, with loss mask 0 on the tokens of the ``observations`` spans.

    ``text`` is cut at the spans' edges and each piece is tokenized on its own (no special tokens), the
    way an episode's observation is tokenized apart from the turns around it
    (:mod:`reasoning_rl.envs.episode`): an observation's tokens are exactly ``tokenizer(observation)``'s,
    and no token straddles an edge. Without spans the ids are the whole text's, as an unmasked target's."""
    ids: list[int] = []
    mask: list[int] = []

    def add(piece: str, trained: int) -> None:
        if piece:
            piece_ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
            ids.extend(piece_ids)
            mask.extend([trained] * len(piece_ids))

    done = 0  # characters of text tokenized so far
    for start, end in observations:
        if not done <= start <= end <= len(text):
            raise ValueError(f"observation spans must be sorted, disjoint and inside the text of {len(text)} "
                             f"characters; got {list(observations)}")
        add(text[done:start], 1)
        add(text[start:end], 0)
        done = end
    add(text[done:], 1)
    return MaskedTokens([*ids, tokenizer.eos_token_id], [*mask, 1])


def environment_observations(env: str, options: Mapping[str, Any]) -> Callable[[Any], Spans]:
    """``example -> spans``: the observation spans of the example's target (``example.solution``) as
    environment ``env`` (built with ``options``, then ``reset`` on the example) reports them."""

    def spans(example: Any) -> Spans:
        environment = get_environment(env, **dict(options))
        environment.reset(example)
        return environment.observation_spans(example.solution or "")

    return spans


class ObservationMaskedSFT(SFT):
    """The warm start's ``sft`` with ``mask_observations``: each target is a :func:`masked_target`, so the
    loss and its token count leave the environment's observations out."""

    def __init__(self, ctx: RunContext, observations: Callable[[Any], Spans]) -> None:
        super().__init__(ctx)
        self.observations = observations
        self._encoded: dict[int, tuple[Any, MaskedTokens]] = {}
        """Each target encoded once (an environment is built per target to find its spans), by identity."""

    def encode_examples(self, examples: list[Any]) -> list[list[int]]:
        return [self._encode(e) for e in examples]

    def _encode(self, example: Any) -> MaskedTokens:
        held = self._encoded.get(id(example))
        if held is None or held[0] is not example:
            held = self._encoded[id(example)] = (example, masked_target(self.ctx.tokenizer, example.solution or "",
                                                                        self.observations(example)))
        return held[1]


def supervised_warm_start(
    model: Any,
    tokenizer: Any,
    engine: RolloutEngine,
    examples: list[Example],
    cfg: WarmStartConfig,
    reward: Any,
    sampling: SamplingConfig,
    seed: int,
    timeout: float,
    pool: Any,
    env: str | None = None,
    env_options: Mapping[str, Any] | None = None,
    guard: RewardGuard | None = None,
) -> WarmStartResult:
    """``sft`` steps on the reference answers until the probe's greedy accuracy reaches the target
    (or ``max_steps``); ``engine`` samples the probe from ``model`` as it trains. ``env`` and
    ``env_options`` (``task.env``, ``task.episode.options``) say where the observations are
    (``cfg.mask_observations``); ``guard`` checks the probe's scores (reasoning_rl.reward_guard)."""
    targets = warm_start_targets(examples, cfg)
    run = TrainConfig(algo=warm_start_settings(cfg), trainer=TrainerConfig(steps=cfg.max_steps, seed=seed))
    ctx = RunContext(cfg=run, run_dir=Path("."), model=model, tokenizer=tokenizer,
                     device=next(model.parameters()).device, engine=engine,
                     sampling=replace(sampling, temperature=1.0),  # the plain log-likelihood
                     reward=reward, pool=pool, train_examples=targets,
                     sampler=DrawWithReplacement(len(targets), seed))  # type: ignore[arg-type]
    if problem := mask_observations_problem(cfg, env):
        raise ConfigError(problem)
    if cfg.mask_observations:
        sft: SFT = ObservationMaskedSFT(ctx, environment_observations(env, env_options or {}))
        first = sft.encode_examples(targets[: cfg.probe_size])
        log.info("warm start: observation tokens left out of the loss: %d of %d target tokens (first %d targets)",
                 sum(len(t) - sum(t.loss_mask) for t in first), sum(len(t) for t in first), len(first))
    else:
        sft = SFT(ctx)
    sft.setup(None)
    # torch's default AdamW kernel, as the warm start always used: the fused kernel of build_optimizer
    # rounds differently, and over a few hundred steps at this learning rate that moved where the
    # default run's warm start stops (same step, probe accuracy 0.391 instead of 0.344; measured).
    for group in sft.optimizer.param_groups:
        group["fused"] = None
    probe = list(examples[: cfg.probe_size])
    greedy = SamplingConfig(max_new_tokens=sampling.max_new_tokens, do_sample=False, stop=sampling.stop)
    history: list[dict[str, float]] = []
    accuracy = 0.0
    step = 0
    for step in range(1, cfg.max_steps + 1):
        loss = sft.step(step - 1).metrics["loss/total"]
        if step % cfg.check_every == 0 or step == cfg.max_steps:
            accuracy = accuracy_of(engine, probe, reward, greedy, 1, seed, timeout, pool,
                                   guard=guard, phase="warm-start probe")
            history.append({"step": step, "loss": loss, "probe_accuracy": accuracy})
            log.info("warm start step %d: loss %.3f, probe greedy accuracy %.3f", step, loss, accuracy)
            if accuracy >= cfg.stop_at_accuracy:
                break
    return WarmStartResult(steps=step, probe_accuracy=accuracy, history=history)
