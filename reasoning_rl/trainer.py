"""The run loop every algorithm shares, read top to bottom (:meth:`Trainer.train`):

    build         model + tokenizer (or the newest intact checkpoint when resuming), task examples,
                  reward, verifier workers; the rollout stack (reasoning_rl.rollouts.stack)
    warm start    optional supervised phase (RL needs a policy that is sometimes right)
    algorithm     algo.name -> the registered module (reasoning_rl.algo.registry); setup()
    evaluate      held-out accuracy before training; the KL probe's samples of pi_0 (when on)
    for each step: algorithm.step() -> log metrics (and kl/base_forward every N) and completions -> checkpoint
    evaluate      held-out accuracy after training; plot, summary.json

What a rollout is (the engine of ``rollout.backend``, injected mismatch, asynchrony, episodes,
sharding) is composed once into one :class:`~reasoning_rl.rollouts.stack.RolloutStack` (docs/rollouts.md).
The loop holds it and calls the same few methods whatever its layers: ``sync`` after every update,
``prefetch`` before every step (asynchronous rollouts request what the algorithm says it will sample,
``Algorithm.next_request``), ``pop_metrics``, ``weight_history`` in a checkpoint. The algorithm samples
from its ``rollout`` top (``RunContext.engine``); evaluation from its ``policy_engine``.

What differs between algorithms (extra models, optimiser, the step itself) lives in
their modules (``reasoning_rl/algo/grpo.py``); everything here is the same for all.

Data-parallel (``torchrun --nproc_per_node N``; reasoning_rl.distributed): every rank runs this
loop on its shard of each step's prompts; the step's metrics are combined over ranks; rank 0
alone writes the run folder (config, metrics, completions of every rank, checkpoints, summary,
plot) and runs the held-out evaluation while the other ranks wait at a barrier. With
``trainer.fsdp=true`` the policy and the reference are sharded over the ranks once the algorithm
is set up (:func:`reasoning_rl.distributed.shard_run`); sampling and evaluation gather their full
parameters first.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reasoning_rl import compat, distributed
from reasoning_rl.algo.base import Algorithm, RunContext
from reasoning_rl.algo.registry import get_algorithm
from reasoning_rl.config import TrainConfig
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.evaluation.during_training import DuringTraining
from reasoning_rl.memory import memory_report
from reasoning_rl.policy.loading import apply_memory_settings, load_model, load_pretrained
from reasoning_rl.policy.planner import log_plan
from reasoning_rl.policy.prepare import prepare_policy
from reasoning_rl.policy.runtime_check import check_runtime
from reasoning_rl.reward_guard import RewardGuard
from reasoning_rl.rollouts.prompt_sampler import PromptSampler
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.rollouts.stack import RolloutStack, build_stack
from reasoning_rl.run_folder import checkpoint as ckpt
from reasoning_rl.run_folder.atomic import atomic_write_text
from reasoning_rl.run_folder.log import open_run_log
from reasoning_rl.run_folder.metrics_log import plot_training_curves, read_metrics, with_heldout_ends
from reasoning_rl.tasks import Task
from reasoning_rl.validation import validate
from reasoning_rl.warmstart import supervised_warm_start
from rewards.pool import WorkerPool

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """Owns the run folder, the policy, the data and the algorithm; :meth:`train` runs the loop above."""

    def __init__(self, cfg: TrainConfig, run_dir: str | Path) -> None:
        validate(cfg)
        entry = get_algorithm(cfg.algo.name)
        self._owns_process_group = distributed.init_from_env()
        check_world_size(cfg, distributed.world_size())
        compat.refuse(cfg, distributed.world_size())  # the rules that depend on the number of processes
        self.cfg = cfg
        self.run_dir = Path(distributed.broadcast_object(str(run_dir)))  # rank 0's folder on every rank
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if cfg.trainer.num_threads:
            torch.set_num_threads(cfg.trainer.num_threads)
        seed_everything(cfg.trainer.seed)
        self.task = Task(cfg.task)
        self.reward = self.task.reward()
        self.pool = WorkerPool(cfg.rollout.reward_workers)
        self.sampling = SamplingConfig(
            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
            max_new_tokens=cfg.rollout.max_new_tokens, stop=list(cfg.rollout.stop),
        )
        # Rank 0 verifies (skipping corrupt checkpoints, with a warning naming each) and decides for every rank.
        latest = ckpt.resume_checkpoint(self.run_dir) if cfg.trainer.resume and distributed.is_main() else None
        self.resume_from = distributed.broadcast_object(latest)
        if cfg.trainer.resume and self.resume_from is None:
            log.warning("trainer.resume=true but %s holds no complete checkpoint; starting fresh", self.run_dir)
        if self.resume_from is not None:
            self.model, self.tokenizer = load_pretrained(str(self.resume_from), device=cfg.model.device,
                                                         dtype=cfg.model.dtype)
            apply_memory_settings(self.model, cfg.model)  # checkpointing and the LM-head chunk, as on a fresh start
        else:
            self.model, self.tokenizer = load_model(cfg.model)
        self.device = next(self.model.parameters()).device
        # Allocator, precision and runtime (reasoning_rl.policy.prepare).
        self.runtime = prepare_policy(self.model, cfg, sharded=distributed.fsdp_active(cfg))
        self.train_examples = self.task.examples(self.task.train_split, self.tokenizer)
        self.guard = RewardGuard.of(cfg.trainer)  # stops the run on a broken verifier
        self.evaluation = DuringTraining.build(cfg, self.task, self.tokenizer, self.sampling, self.reward,
                                               self.pool, self.guard)
        self.sampler = PromptSampler(len(self.train_examples), cfg.trainer.seed)
        # What a rollout is, composed once: engine, injection, asynchrony, episodes, sharding (docs/rollouts.md).
        self.rollouts: RolloutStack = build_stack(cfg, self.model, self.tokenizer, self.reward, self.run_dir,
                                                  self.train_examples + self.evaluation.examples)
        log.info("rollout stack: %s", self.rollouts.describe())
        self.context = RunContext(
            cfg=cfg, run_dir=self.run_dir, model=self.model, tokenizer=self.tokenizer, device=self.device,
            engine=self.rollouts.rollout, sampling=self.sampling, reward=self.rollouts.reward(self.reward),
            pool=self.pool, reward_guard=self.guard, train_examples=self.train_examples, sampler=self.sampler,
            resumed=self.resume_from is not None,
        )
        self.algorithm: Algorithm = entry.algorithm(self.context)
        # The runtime's log-probs against transformers' modules on a few sampled tokens (stops the run when they differ).
        self.runtime_check = check_runtime(self.model, self.tokenizer, self.rollouts.base,
                                           [ex.prompt for ex in self.train_examples[:2]], self.sampling,
                                           group_size=self.algorithm.samples_per_prompt(), seed=cfg.trainer.seed)
        self.rollouts.base.pop_metrics()  # what the engine measured on the check's batch is not step 1's
        log.info("policy runtime check: %s", self.runtime_check.describe())
        self._check_metrics = {"policy/runtime_max_abs_diff": self.runtime_check.max_abs_diff}  # on every step
        self.memory_plan = log_plan(cfg, self.model, self.tokenizer, [e.prompt for e in self.train_examples])
        self.step = 0

    @property
    def engine(self) -> Any:
        """The engine that samples the policy as it is (held-out evaluation, the KL probe)."""
        return self.rollouts.policy_engine

    @property
    def eval_examples(self) -> list[Any]:
        return self.evaluation.examples

    # -- phases -----------------------------------------------------------------------------------------
    def _warm_start(self) -> dict[str, Any] | None:
        w = self.cfg.warmstart
        if not w.enabled or self.resume_from is not None:
            return None
        log.info("[warm start] supervised phase on the task's references (target probe accuracy %.2f)",
                 w.stop_at_accuracy)
        # The probe samples the model as it trains (task.env: whole episodes), never a stale copy of it.
        probe_engine = self.rollouts.live_engine(self.model, self.tokenizer, self.cfg.rollout.batch_size)
        result = supervised_warm_start(
            self.model, self.tokenizer, probe_engine, self.train_examples, w, self.reward, self.sampling,
            seed=self.cfg.trainer.seed, timeout=self.cfg.rollout.reward_timeout, pool=self.pool,
            env=self.cfg.task.env, env_options=self.cfg.task.episode.options, guard=self.guard,
        )
        log.info("[warm start] stopped after %d steps at probe accuracy %.3f", result.steps, result.probe_accuracy)
        return {"steps": result.steps, "probe_accuracy": result.probe_accuracy, "history": result.history}

    def _setup_algorithm(self) -> None:
        """The algorithm's models and optimiser; on resume, its state, the data position and the RNGs."""
        state = ckpt.load_trainer_state(self.resume_from) if self.resume_from is not None else None
        distributed.broadcast_parameters(self.model)  # every rank starts from rank 0's weights
        self.algorithm.setup(state)
        self.rollouts.attach_reference(self.algorithm, self.cfg)  # async: the generator's pi_ref log-probs
        # trainer.fsdp on several ranks: the models sharded once set up whole (nothing otherwise).
        self.rollouts.shard([self.model, *self.algorithm.held_models()], self.algorithm.optimizers())
        if state is not None:
            self.sampler.load_state_dict(state["sampler"])
            self.step = state["step"]
            ckpt.set_rng_state(state["rng"])
            log.info("resumed from %s at step %d", self.resume_from, self.step)
            self.rollouts.restore_history(state.get("weight_history"))  # the k older versions (exact resume)
        self.rollouts.sync(self.model, self.step)  # the engines sample the weights RL starts with (warm start, resume)
        self._prefetch()  # asynchronous rollouts: the first steps' sampling overlaps the evaluation before RL

    def _prefetch(self) -> None:
        """Asynchronous rollouts: what the algorithm will sample in the next steps, requested ahead."""
        self.rollouts.prefetch(self.step, self.algorithm, self.sampler, self.train_examples)

    # -- the loop ---------------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        cfg = self.cfg
        main = distributed.is_main()
        if main:
            atomic_write_text(self.run_dir / "config.json", json.dumps(asdict(cfg), indent=2, default=str))
        summary: dict[str, Any] = {"run_dir": str(self.run_dir), "algorithm": cfg.algo.name,
                                   "variant": cfg.algo.variant, "label": self.algorithm.label,
                                   "world_size": distributed.world_size(),
                                   "policy_runtime": {**self.runtime.as_dict(), **self.runtime_check.as_dict()}}
        warm = self._warm_start()
        if warm is not None:
            summary["warm_start"] = warm
        self._setup_algorithm()
        self.evaluation.start_kl_probe(self.model, self.engine, self.run_dir, self.resume_from is not None,
                                       self.train_examples)
        # A fresh start keeps no metrics of an earlier attempt in this folder; a resumed run
        # drops those written after its checkpoint, so the log has each step once.
        logger = open_run_log(cfg, self.run_dir, self.step, main, self.context)  # + trackers, health, preflight
        before_path = self.run_dir / "eval_before.json"
        # Decided on rank 0 (the one that writes the file) so that every rank meets the same barriers.
        if distributed.broadcast_object(bool(self.eval_examples) and (self.resume_from is None
                                                                      or not before_path.exists())):
            before = self.evaluate()
            if main:
                atomic_write_text(before_path, json.dumps(before, indent=2))
                log.info("[eval before %s] %s", self.algorithm.label, before)
        progress = _progress(cfg.trainer.progress_bar and main, cfg.trainer.steps, self.step, self.algorithm.label)
        try:
            while self.step < cfg.trainer.steps:
                version = self.rollouts.sampling_version(self.step)  # the policy that samples this step's rollouts
                t0 = time.perf_counter()
                self._prefetch()
                out = self.algorithm.step(self.step)
                self.step += 1
                self.rollouts.sync(self.model, self.step)  # the new weights into the engines
                elapsed = time.perf_counter() - t0
                metrics = {**out.metrics, **self.rollouts.pop_metrics(), **self._check_metrics,
                           "rollout/policy_version": version, "time/step": elapsed}
                metrics = distributed.reduce_metrics(metrics)  # over ranks (docs/metrics.md)
                if "completion/tokens" in metrics:
                    metrics["throughput/completion_tokens_per_s"] = metrics["completion/tokens"] / max(elapsed, 1e-9)
                metrics.update(self.evaluation.step_metrics(self.step, self.engine, self.model))  # kl/base, eval/*
                logger.log(self.step, metrics)
                if cfg.trainer.log_completions:
                    rows = distributed.gather_lists([self._tag(row, version) for row in out.completions])
                    if rows:
                        logger.log_completions(self.step, rows)
                if cfg.trainer.save_every and self.step % cfg.trainer.save_every == 0 and self.step < cfg.trainer.steps:
                    self.save()
                if progress is not None:
                    progress.update(1)
                    progress.set_postfix(reward=f"{metrics.get('reward/mean', float('nan')):.3f}",
                                         acc=f"{metrics.get('accuracy/train', float('nan')):.2f}",
                                         s_per_step=f"{elapsed:.2f}")
        finally:
            if progress is not None:
                progress.close()
            logger.close()
        # Measured before the final evaluation, while the last step's gradients are still held.
        # (This rank's share under FSDP: a sharded tensor counts its local slice.)
        summary["memory"] = memory_report(distributed.local_models([self.model, *self.algorithm.held_models()]),
                                          distributed.local_optimizers(self.algorithm.optimizers()))
        final = self.save()
        summary["final_checkpoint"] = str(final)
        if self.eval_examples:
            after = self.evaluate()
            if main:
                atomic_write_text(self.run_dir / "eval_after.json", json.dumps(after, indent=2))
                summary["eval_before"] = json.loads(before_path.read_text())
                summary["eval_after"] = after
        if main:
            curves = read_metrics(self.run_dir / "metrics.jsonl")
            if "eval_after" in summary:  # the held-out panel starts at step 0 and ends after training
                curves = with_heldout_ends(curves, summary["eval_before"], summary["eval_after"], self.step)
            plot = plot_training_curves(curves, self.run_dir / "reward_curve.png")
            summary["plot"] = str(plot) if plot else None
            atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        # Every rank returns rank 0's summary (written, with evaluation and plot), once it is on disk.
        return distributed.broadcast_object(summary)

    def evaluate(self) -> dict[str, float]:
        """Held-out greedy and sampled accuracy (and retention) of the current policy
        (reasoning_rl.evaluation.during_training); {} on ranks other than 0."""
        return self.evaluation.evaluate(self.engine, self.model)

    @staticmethod
    def _tag(row: dict[str, Any], version: int) -> dict[str, Any]:
        """A completions.jsonl row with the policy version that sampled it (and its rank when there are several)."""
        tagged = {**row, "policy_version": version}
        if distributed.is_distributed():
            tagged["rank"] = distributed.rank()
        return tagged

    def save(self) -> Path:
        """``checkpoint-<step>``: the policy, what resuming needs (algorithm state, data position) and how
        the policy was prompted (``prompting.json``, read by ``reasoning-rl-eval``).
        Every rank calls it; rank 0 writes, the others wait until it is complete (reasoning_rl.run_folder.checkpoint)."""
        state = {**self.algorithm.state_dict(), "sampler": self.sampler.state_dict()}
        history = self.rollouts.weight_history()  # the k older versions the next steps sample with (exact resume)
        if history is not None:
            state["weight_history"] = history
        return ckpt.save_checkpoint(self.run_dir, self.step, self.model, self.tokenizer, state,
                                    keep=self.cfg.trainer.keep_checkpoints, prompting=self.prompting())

    def prompting(self) -> dict[str, Any]:
        """``prompting.json`` of a checkpoint: the task's prompt settings, and the length and stop strings
        held-out evaluation generates with (reported by ``reasoning-rl-eval`` when its own differ)."""
        return {**self.task.prompting(), "max_new_tokens": self.sampling.max_new_tokens,
                "stop": list(self.sampling.stop)}

    def close(self) -> None:
        self.rollouts.close()  # the asynchronous generator process, when there is one
        self.algorithm.close()
        self.pool.close()
        if self._owns_process_group:
            distributed.shutdown()


def check_world_size(cfg: TrainConfig, world_size: int) -> None:
    """Each rank takes ``prompts_per_step / world_size`` whole prompts (groups are never split)."""
    k = cfg.algo.prompts_per_step
    if world_size > 1 and k % world_size:
        raise ConfigError(f"algo.prompts_per_step={k} cannot be split evenly over {world_size} ranks: set it to a "
                          f"multiple of {world_size} (e.g. {world_size * max(1, round(k / world_size))}) or launch a "
                          f"number of processes that divides {k}")


def _progress(enabled: bool, total: int, initial: int, label: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=label, unit="step", dynamic_ncols=True)
