"""What the run loop measures of the policy besides training (reasoning_rl.trainer): held-out accuracy
(``evaluation.*``, reasoning_rl.evaluation.heldout), retention (``evaluation.retention``,
reasoning_rl.evaluation.retention) and the forward KL to the policy RL started from
(``evaluation.kl_to_base_every``, reasoning_rl.evaluation.kl_to_base). All three sample the policy as it is
(the rollout stack's ``policy_engine``), never the training rollouts' engine.

Data-parallel: rank 0 evaluates on every held-out problem while the other ranks wait; each rank samples
(and saves) its own KL probe and the logged value is their mean.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasoning_rl import distributed
from reasoning_rl.evaluation.heldout import evaluate_heldout
from reasoning_rl.evaluation.kl_to_base import BaseProbe, forward_kl, sample_probe
from reasoning_rl.evaluation.retention import Retention
from reasoning_rl.policy.loading import set_training
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.run_folder import checkpoint as ckpt

log = logging.getLogger(__name__)


@dataclass
class DuringTraining:
    """The run's evaluation settings and data, built once by :meth:`build`."""

    cfg: Any
    """The run's TrainConfig."""
    task: Any
    tokenizer: Any
    sampling: SamplingConfig
    reward: Any
    pool: Any
    guard: Any
    """The run's RewardGuard (a broken verifier stops the run in evaluation too)."""
    examples: list[Any]
    """The held-out examples (``evaluation.num_examples`` of the task's eval split; empty: off)."""
    retention: Retention
    probe: BaseProbe | None = None

    @classmethod
    def build(cls, cfg: Any, task: Any, tokenizer: Any, sampling: SamplingConfig, reward: Any, pool: Any,
              guard: Any) -> DuringTraining:
        e, split = cfg.evaluation, task.eval_split
        examples = task.examples(split, tokenizer)[: e.num_examples] if e.enabled and split else []
        return cls(cfg, task, tokenizer, sampling, reward, pool, guard, examples,
                   Retention.build(e.retention, task, tokenizer, sampling))

    def evaluate(self, engine: Any, model: Any) -> dict[str, float]:
        """Held-out greedy and sampled accuracy (and retention) of the policy ``engine`` samples.
        Data-parallel: rank 0 evaluates on all held-out problems, the other ranks wait and get {}
        (a sharded policy is first gathered on every rank, so rank 0 samples without collectives)."""
        seed, guard = self.cfg.trainer.seed, self.guard
        with distributed.full_parameters(model):
            if not distributed.is_main():
                distributed.barrier()
                return {}
            result = evaluate_heldout(engine, self.examples, self.reward, self.sampling,
                                      self.cfg.evaluation.samples_per_problem, seed=seed,
                                      timeout=self.cfg.rollout.reward_timeout, pool=self.pool, guard=guard)
            retained = self.retention.evaluate(engine, seed=seed, pool=self.pool, guard=guard)
            set_training(model, True)
            distributed.barrier()
        return {**result.as_dict(), **retained}

    def start_kl_probe(self, model: Any, engine: Any, run_dir: Path, resumed: bool, train_examples: list[Any]) -> None:
        """The probe of ``kl/base_forward`` when ``evaluation.kl_to_base_every`` is set: sampled with
        ``engine`` from the policy as RL starts and saved, or the saved one when resuming."""
        e = self.cfg.evaluation
        if not e.kl_to_base_every:
            return
        suffix = f".rank{distributed.rank()}" if distributed.is_distributed() else ""
        path = run_dir / f"kl_base_probe{suffix}.json"
        if resumed:
            if path.exists():
                self.probe = BaseProbe.load(path)
                return
            log.warning("evaluation.kl_to_base_every: %s is missing, so pi_0 of this run is unknown on resume; "
                        "kl/base_forward is not logged (start a new run folder to measure it)", path)
            return
        task = self.task
        split = task.eval_split or task.train_split
        examples = task.examples(split, self.tokenizer) if split != task.train_split else train_examples
        rng = ckpt.rng_state()  # sampling the probe reseeds torch: the run's random stream stays as without it
        probe = sample_probe(model, engine, [ex.prompt for ex in examples], e.kl_to_base_prompts,
                             e.kl_to_base_samples, self.sampling, self.tokenizer.pad_token_id,
                             seed=self.cfg.trainer.seed, micro_batch=self.cfg.algo.micro_batch_size)
        ckpt.set_rng_state(rng)
        probe.save(path)
        log.info("kl/base_forward: probe of %d completions (%d tokens) sampled from pi_0, saved to %s",
                 len(probe.completions), probe.num_tokens, path)
        self.probe = probe

    def step_metrics(self, step: int, engine: Any, model: Any) -> dict[str, float]:
        """What is measured after step ``step`` (1-based): ``kl/base_forward`` every ``kl_to_base_every``
        steps, ``eval/*`` every ``evaluation.every`` steps; {} on the other steps."""
        e, out = self.cfg.evaluation, {}
        if self.probe is not None and step % e.kl_to_base_every == 0:
            out["kl/base_forward"] = forward_kl(model, self.probe, self.tokenizer.pad_token_id, self.sampling,
                                                self.cfg.algo.micro_batch_size)
        if e.every and self.examples and step % e.every == 0:
            out.update({f"eval/{k}": v for k, v in self.evaluate(engine, model).items()})
        return out
