"""The run loop every algorithm shares, read top to bottom (:meth:`Trainer.train`):

    build         model + tokenizer (or the newest intact checkpoint when resuming), rollout engine,
                  task examples, reward, verifier workers
    warm start    optional supervised phase (RL needs a policy that is sometimes right)
    algorithm     algo.name -> the registered module (reasoning_rl.algo.registry); setup()
    evaluate      held-out accuracy before training; the KL probe's samples of pi_0 (when on)
    for each step: algorithm.step() -> log metrics (and kl/base_forward every N) and completions -> checkpoint
    evaluate      held-out accuracy after training; plot, summary.json

Asynchronous rollouts (``rollout.max_staleness=k >= 1``, reasoning_rl.rollouts.async_engine): before each step the
loop requests the rollouts of that step and the next k from a generator process (the prompt sampler's
prompts of those steps, each step's seed, the weights of version max(0, s - k)), and hands it every new
version after the update; the algorithm's ``generate`` call then returns what was sampled meanwhile.

What differs between algorithms (extra models, optimiser, the step itself) lives in
their modules (``reasoning_rl/algo/grpo.py``); everything here is the same for all.

Data-parallel (``torchrun --nproc_per_node N``; reasoning_rl.distributed): every rank runs this
loop on its shard of each step's prompts; the step's metrics are combined over ranks; rank 0
alone writes the run folder (config, metrics, completions of every rank, checkpoints, summary,
plot) and runs the held-out evaluation while the other ranks wait at a barrier. With
``trainer.fsdp=true`` the policy and the reference are sharded over the ranks once the algorithm
is set up (:meth:`Trainer._shard`); sampling and evaluation gather their full parameters first.
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

from reasoning_rl import distributed
from reasoning_rl.algo.base import Algorithm, RunContext
from reasoning_rl.algo.batch import step_seed
from reasoning_rl.algo.registry import get_algorithm
from reasoning_rl.async_checks import reference_refusal
from reasoning_rl.config import ConfigError, TrainConfig, validate
from reasoning_rl.envs.episode import with_environment
from reasoning_rl.evaluation.heldout import evaluate_heldout
from reasoning_rl.evaluation.kl_to_base import BaseProbe, forward_kl, sample_probe
from reasoning_rl.evaluation.retention import Retention
from reasoning_rl.memory import allocator_choice, memory_report, set_allocator
from reasoning_rl.policy.engines import HFEngine, make_engine
from reasoning_rl.policy.loading import apply_memory_settings, load_model, load_pretrained, set_training
from reasoning_rl.policy.planner import log_plan
from reasoning_rl.policy.precision import mark_precision
from reasoning_rl.policy.runtime import decide_runtime, set_runtime
from reasoning_rl.policy.runtime_check import check_runtime
from reasoning_rl.reward_guard import RewardGuard
from reasoning_rl.rollouts.async_engine import AsyncEngine, Request, async_engine, trainer_reward
from reasoning_rl.rollouts.inject import inject_engine
from reasoning_rl.rollouts.prompt_sampler import PromptSampler
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.run_folder import checkpoint as ckpt
from reasoning_rl.run_folder.atomic import atomic_write_text
from reasoning_rl.run_folder.log import open_run_log
from reasoning_rl.run_folder.metrics_log import plot_training_curves, read_metrics, with_heldout_ends
from reasoning_rl.tasks import Task
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
        if cfg.rollout.max_staleness and distributed.is_distributed():
            raise ConfigError("rollout.max_staleness with several processes (torchrun) is not supported (one "
                              "generator for one trainer process); set rollout.max_staleness=0 or run one process")
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
        # trainer.keep_freed_memory: glibc keeps freed blocks (tiny models: no page faults) or returns large ones.
        allocator, settings = allocator_choice(cfg.trainer.keep_freed_memory,
                                               sum(p.numel() for p in self.model.parameters()), self.device.type == "cpu")
        setting = "auto" if cfg.trainer.keep_freed_memory is None else cfg.trainer.keep_freed_memory
        log.info("memory allocator: %s (trainer.keep_freed_memory=%s)%s", allocator, setting,
                 "" if set_allocator(settings) else "; not applied: this C library has no mallopt or refused it")
        mark_precision(self.model, cfg.trainer.precision)  # engines with their own weights (vLLM) follow it
        # model.runtime, decided once: the training log-probs and the native engine run what it says.
        self.runtime = decide_runtime(self.model, cfg.model.runtime, training=True,
                                      sharded=cfg.trainer.fsdp and distributed.is_distributed())
        set_runtime(self.model, self.runtime)
        log.info("policy runtime: %s", self.runtime.describe())
        self.engine = make_engine(cfg.rollout.backend, self.model, self.tokenizer, batch_size=cfg.rollout.batch_size,
                                  rollout=cfg.rollout, workdir=self.run_dir / ".vllm", seed=cfg.trainer.seed)
        # Training rollouts come from a perturbed copy when rollout.inject makes a mismatch (reasoning_rl.rollouts.inject).
        rollout_engine = inject_engine(self.engine, cfg.rollout, self.model, cfg.trainer.seed)
        # rollout.max_staleness >= 1: they come from a generator process running ahead (reasoning_rl.rollouts.async_engine),
        # scored there too (the algorithm's reward then hands over the generator's scores: trainer_reward).
        rollout_engine = async_engine(rollout_engine, cfg.rollout, self.model, self.tokenizer, reward=self.reward)
        self.train_examples = self.task.examples(self.task.train_split, self.tokenizer)
        eval_split = self.task.eval_split
        self.eval_examples = (
            self.task.examples(eval_split, self.tokenizer)[: cfg.evaluation.num_examples]
            if cfg.evaluation.enabled and eval_split else []
        )
        self.retention = Retention.build(cfg.evaluation.retention, self.task, self.tokenizer, self.sampling)
        self.sampler = PromptSampler(len(self.train_examples), cfg.trainer.seed)
        # The runtime's log-probs against transformers' modules on a few sampled tokens (stops the run when they differ).
        self.runtime_check = check_runtime(self.model, self.tokenizer, self.engine,
                                           [ex.prompt for ex in self.train_examples[:2]], self.sampling,
                                           group_size=getattr(cfg.algo, "group_size", 1), seed=cfg.trainer.seed)
        _engine_metrics(self.engine)  # what the engine measured on the check's batch is not step 1's
        # task.env: every rollout, training and held-out, is a multi-turn episode (reasoning_rl.envs, docs/tools.md).
        self.engine, rollout_engine = with_environment(cfg.task, self.tokenizer, self.engine, rollout_engine,
                                                       self.train_examples + self.eval_examples)
        log.info("policy runtime check: %s", self.runtime_check.describe())
        self._check_metrics = {"policy/runtime_max_abs_diff": self.runtime_check.max_abs_diff}  # on every step
        self.memory_plan = log_plan(cfg, self.model, self.tokenizer, [e.prompt for e in self.train_examples])
        self.context = RunContext(
            cfg=cfg, run_dir=self.run_dir, model=self.model, tokenizer=self.tokenizer, device=self.device,
            engine=rollout_engine, sampling=self.sampling, reward=trainer_reward(self.reward, rollout_engine),
            pool=self.pool, reward_guard=RewardGuard.of(cfg.trainer),  # stops the run on a broken verifier
            train_examples=self.train_examples, sampler=self.sampler, resumed=self.resume_from is not None,
        )
        self.algorithm: Algorithm = entry.algorithm(self.context)
        self.step = 0
        if cfg.trainer.fsdp and not distributed.is_distributed():
            log.info("trainer.fsdp=true in a single process: there is nothing to shard, the model stays whole")

    # -- phases -----------------------------------------------------------------------------------------
    def _warm_start(self) -> dict[str, Any] | None:
        w = self.cfg.warmstart
        if not w.enabled or self.resume_from is not None:
            return None
        log.info("[warm start] supervised phase on the task's references (target probe accuracy %.2f)",
                 w.stop_at_accuracy)
        # The probe samples the model as it trains; an engine with its own copy of the weights
        # (vLLM) would probe stale ones, so the warm start probes with transformers' generate.
        # (task.env: the episode engine over an hf engine, so the probe runs whole episodes.)
        probe_engine = self.engine if isinstance(getattr(self.engine, "inner", self.engine), HFEngine) else HFEngine(
            self.model, self.tokenizer, batch_size=self.cfg.rollout.batch_size)
        result = supervised_warm_start(
            self.model, self.tokenizer, probe_engine, self.train_examples, w, self.reward, self.sampling,
            seed=self.cfg.trainer.seed, timeout=self.cfg.rollout.reward_timeout, pool=self.pool,
            env=self.cfg.task.env, env_options=self.cfg.task.episode.options, guard=self.context.reward_guard,
        )
        log.info("[warm start] stopped after %d steps at probe accuracy %.3f", result.steps, result.probe_accuracy)
        return {"steps": result.steps, "probe_accuracy": result.probe_accuracy, "history": result.history}

    def _setup_algorithm(self) -> None:
        """The algorithm's models and optimiser; on resume, its state, the data position and the RNGs."""
        state = ckpt.load_trainer_state(self.resume_from) if self.resume_from is not None else None
        distributed.broadcast_parameters(self.model)  # every rank starts from rank 0's weights
        self.algorithm.setup(state)
        self._reference_to_generator()
        if self.cfg.trainer.fsdp and distributed.is_distributed():
            self._shard()
        if state is not None:
            self.sampler.load_state_dict(state["sampler"])
            self.step = state["step"]
            ckpt.set_rng_state(state["rng"])
            log.info("resumed from %s at step %d", self.resume_from, self.step)
            self._restore_history(state.get("weight_history"))
        self._sync_engine()  # the engine samples from the weights RL starts with (warm start, resume)
        self._prefetch()  # asynchronous rollouts: the first steps' sampling overlaps the evaluation before RL

    def _stale_versions(self) -> int:
        """How many versions behind the training rollouts may be: rollout.max_staleness or rollout.inject.stale."""
        return self.cfg.rollout.max_staleness or self.cfg.rollout.inject.stale

    def _restore_history(self, history: list[tuple[int, dict[str, Any]]] | None) -> None:
        """A resumed run's k older weight versions (rollout.inject.stale, rollout.max_staleness), saved with the
        checkpoint, back into the engine that samples with them: the steps after the resume sample exactly
        as without the break."""
        k = self._stale_versions()
        if not k:
            return
        if history is None:
            log.warning("the checkpoint holds no weight history (written before it was saved), so the first %d "
                        "steps after this resume sample from the resumed weights, fewer updates back than a run "
                        "without the break", k)
            return
        self.context.engine.load_history(history)

    def _reference_to_generator(self) -> None:
        """rollout.max_staleness: the generator computes the reference log-probs of its completions when the
        algorithm offers its reference (``generator_reference``: the grpo module, by the rule of
        reasoning_rl.async_checks.reference_refusal); otherwise the algorithm's update computes them."""
        engine = self.context.engine
        if not isinstance(engine, AsyncEngine):
            return
        offer = getattr(self.algorithm, "generator_reference", None)
        job = offer() if offer is not None else None
        if job is not None:
            engine.set_reference(job)
            log.info("asynchronous rollouts: the generator process samples, scores the rewards and computes the "
                     "reference log-probs; the trainer updates")
            return
        why = (reference_refusal(self.cfg) or "no reference model") if offer is not None else \
            f"algo.name={self.cfg.algo.name!r} computes them in its update"
        log.info("asynchronous rollouts: the generator process samples and scores the rewards; the update computes "
                 "the reference log-probs (%s)", why)

    def _prefetch(self) -> None:
        """rollout.max_staleness: request the rollouts of this step and the next k (those not yet requested).
        Step s samples with version max(0, s - k), the prompt sampler's prompts of that step, its seed."""
        engine = self.context.engine
        if not isinstance(engine, AsyncEngine):
            return
        a, last = self.cfg.algo, min(self.cfg.trainer.steps, self.step + engine.k + 1)
        if engine.next_step < self.step:
            engine.skip_to(self.step)  # a resumed run: earlier steps are done
        if last <= engine.next_step:
            return
        ahead = self.sampler.upcoming(a.prompts_per_step, last - self.step)
        examples = {s: [self.train_examples[i] for i in ahead[s - self.step]] for s in range(engine.next_step, last)}
        engine.prefetch([Request(step=s, prompts=[e.prompt for e in ex], n=a.group_size, sampling=self.sampling,
                                 seed=step_seed(self.cfg.trainer.seed, s), version=max(0, s - engine.k),
                                 references=[e.reference for e in ex], fields=[dict(e.fields) for e in ex])
                         for s, ex in examples.items()])

    def _sampling_version(self) -> int:
        """The policy version that samples this step's training rollouts."""
        engine = self.context.engine
        if isinstance(engine, AsyncEngine):
            return max(0, self.step - engine.k)
        if engine is not self.engine:  # rollout.inject's behaviour copy
            return engine.policy_version
        return self.step

    def _shard(self) -> None:
        """FSDP2 (``trainer.fsdp=true``): shard the policy and the models the algorithm holds
        (the reference) over the ranks, layer by layer (reasoning_rl.distributed.shard_model).

        Done after the algorithm's setup, on whole models: the reference is copied and saved, the
        optimiser built and a checkpoint's optimiser state loaded exactly as in a single process;
        then each optimiser is pointed at the sharded parameters and keeps its slice of that state.
        From here on the engine samples with the full parameters gathered (FullParameterEngine)."""
        models = [self.model, *self.algorithm.held_models()]
        before = {id(p): (i, name) for i, m in enumerate(models) for name, p in m.named_parameters()}
        for model in models:
            distributed.shard_model(model)
        after = {(i, name): p for i, m in enumerate(models) for name, p in m.named_parameters()}
        successors = {pid: after[key] for pid, key in before.items()}
        for optimizer in self.algorithm.optimizers():
            distributed.reshard_optimizer(optimizer, successors)
        self.engine = self.context.engine = distributed.FullParameterEngine(self.engine, self.model)
        log.info("trainer.fsdp: %d models sharded over %d ranks", len(models), distributed.world_size())

    def _sync_engine(self) -> None:
        """Hand the engine the current weights and the policy version (RL steps done)."""
        update = getattr(self.engine, "update_policy", None)
        if update is not None:
            update(self.model, self.step)
        if self.context.engine is not self.engine:  # rollout.inject's copy (reasoning_rl.rollouts.inject)
            self.context.engine.update_policy(self.model, self.step)

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
        self.kl_probe = self._kl_probe()
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
                version = self._sampling_version()  # the policy that samples this step's rollouts
                t0 = time.perf_counter()
                self._prefetch()
                out = self.algorithm.step(self.step)
                self.step += 1
                self._sync_engine()  # the new weights into the engine, in place
                elapsed = time.perf_counter() - t0
                rollout_metrics = _engine_metrics(self.context.engine) if self.context.engine is not self.engine else {}
                metrics = {**out.metrics, **_engine_metrics(self.engine), **rollout_metrics, **self._check_metrics,
                           "rollout/policy_version": version, "time/step": elapsed}
                metrics = distributed.reduce_metrics(metrics)  # over ranks (docs/metrics.md)
                if "completion/tokens" in metrics:
                    metrics["throughput/completion_tokens_per_s"] = metrics["completion/tokens"] / max(elapsed, 1e-9)
                if self.kl_probe is not None and self.step % cfg.evaluation.kl_to_base_every == 0:
                    metrics["kl/base_forward"] = forward_kl(self.model, self.kl_probe, self.tokenizer.pad_token_id,
                                                            self.sampling, cfg.algo.micro_batch_size)
                if cfg.evaluation.every and self.eval_examples and self.step % cfg.evaluation.every == 0:
                    metrics.update({f"eval/{k}": v for k, v in self.evaluate().items()})
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

    def _kl_probe(self) -> BaseProbe | None:
        """The probe of ``kl/base_forward`` (reasoning_rl.evaluation.kl_to_base) when ``evaluation.kl_to_base_every``
        is set: sampled from the policy as RL starts and saved, or the saved one when resuming.
        Data-parallel: each rank samples (and saves) its own probe; the logged value is their mean."""
        e = self.cfg.evaluation
        if not e.kl_to_base_every:
            return None
        suffix = f".rank{distributed.rank()}" if distributed.is_distributed() else ""
        path = self.run_dir / f"kl_base_probe{suffix}.json"
        if self.resume_from is not None:
            if path.exists():
                return BaseProbe.load(path)
            log.warning("evaluation.kl_to_base_every: %s is missing, so pi_0 of this run is unknown on resume; "
                        "kl/base_forward is not logged (start a new run folder to measure it)", path)
            return None
        split = self.task.eval_split or self.task.train_split
        examples = self.task.examples(split, self.tokenizer) if split != self.task.train_split else self.train_examples
        rng = ckpt.rng_state()  # sampling the probe reseeds torch: the run's random stream stays as without it
        probe = sample_probe(self.model, self.engine, [ex.prompt for ex in examples], e.kl_to_base_prompts,
                             e.kl_to_base_samples, self.sampling, self.tokenizer.pad_token_id,
                             seed=self.cfg.trainer.seed, micro_batch=self.cfg.algo.micro_batch_size)
        ckpt.set_rng_state(rng)
        probe.save(path)
        log.info("kl/base_forward: probe of %d completions (%d tokens) sampled from pi_0, saved to %s",
                 len(probe.completions), probe.num_tokens, path)
        return probe

    def evaluate(self) -> dict[str, float]:
        """Held-out greedy and sampled accuracy of the current policy (reasoning_rl.evaluation.heldout).
        Data-parallel: rank 0 evaluates on all held-out problems, the other ranks wait and get {}
        (a sharded policy is first gathered on every rank, so rank 0 samples without collectives)."""
        with distributed.full_parameters(self.model):
            if not distributed.is_main():
                distributed.barrier()
                return {}
            result = evaluate_heldout(self.engine, self.eval_examples, self.reward, self.sampling,
                                      self.cfg.evaluation.samples_per_problem, seed=self.cfg.trainer.seed,
                                      timeout=self.cfg.rollout.reward_timeout, pool=self.pool, guard=self.context.reward_guard)
            retained = self.retention.evaluate(self.engine, seed=self.cfg.trainer.seed, pool=self.pool,
                                               guard=self.context.reward_guard)
            set_training(self.model, True)
            distributed.barrier()
        return {**result.as_dict(), **retained}

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
        if self._stale_versions():  # the k older versions the next steps sample with (exact resume)
            state["weight_history"] = self.context.engine.weight_history()
        return ckpt.save_checkpoint(self.run_dir, self.step, self.model, self.tokenizer, state,
                                    keep=self.cfg.trainer.keep_checkpoints, prompting=self.prompting())

    def prompting(self) -> dict[str, Any]:
        """``prompting.json`` of a checkpoint: the task's prompt settings, and the length and stop strings
        held-out evaluation generates with (reported by ``reasoning-rl-eval`` when its own differ)."""
        return {**self.task.prompting(), "max_new_tokens": self.sampling.max_new_tokens,
                "stop": list(self.sampling.stop)}

    def close(self) -> None:
        if isinstance(self.context.engine, AsyncEngine):
            self.context.engine.close()
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


def _engine_metrics(engine: Any) -> dict[str, float]:
    """What the engine measured during the step (vLLM: sync time, log-prob mismatch); {} for the others."""
    pop = getattr(engine, "pop_metrics", None)
    return pop() if pop is not None else {}


def _progress(enabled: bool, total: int, initial: int, label: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=label, unit="step", dynamic_ncols=True)
