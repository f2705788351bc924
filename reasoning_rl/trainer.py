"""The GRPO training loop (DeepSeekMath, arXiv 2402.03300, Algorithm 1), read top to bottom:

    for each step:
        prompts      <- next prompts_per_step prompts of the task
        completions  <- G samples per prompt from pi_old (the current policy)
        rewards      <- verifiers (worker processes, hard timeouts)
        advantages   <- group-relative estimator over each prompt's G rewards
        old, ref     <- log-probs of the sampled tokens under pi_old and pi_ref
        repeat mu times: one AdamW step on -J(theta) (clipped ratio, k3 KL)
        log, checkpoint

Departures from the paper, on purpose: the reference model is the policy at the
start of RL (after the optional warm start) and is never refreshed; with mu = 1 the
old log-probs equal the current ones (ratio 1, as in TRL/verl), so they are not
recomputed.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reasoning_rl import checkpoint as ckpt
from reasoning_rl.algo import compute_advantages, grpo_loss, microbatch_weight, zero_std_fraction
from reasoning_rl.batching import pack
from reasoning_rl.config import TrainConfig, validate
from reasoning_rl.heldout import evaluate_heldout, is_correct
from reasoning_rl.logprobs import completion_logprobs
from reasoning_rl.metrics_log import MetricsLogger, plot_training_curves, read_metrics
from reasoning_rl.models import load_model, load_pretrained
from reasoning_rl.rollout import Completion, SamplingConfig, make_engine
from reasoning_rl.tasks import Example, Task, reward_specs
from reasoning_rl.warmstart import supervised_warm_start
from rewards.batch import BatchScores
from rewards.compose import CompositeReward
from rewards.pool import WorkerPool

log = logging.getLogger(__name__)


class PromptSampler:
    """Walks the training examples in a fresh seeded permutation per epoch; its state
    (epoch, position) is saved in checkpoints so a resumed run sees the same prompts."""

    def __init__(self, num_examples: int, seed: int) -> None:
        if num_examples == 0:
            raise ValueError("the task's training split is empty")
        self.num_examples, self.seed = num_examples, seed
        self.epoch, self.position = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.num_examples))
        random.Random(self.seed * 100_003 + epoch).shuffle(order)
        return order

    def next(self, k: int) -> list[int]:
        out = []
        for _ in range(k):
            if self.position == self.num_examples:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._permutation(self.epoch)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def lr_lambda(schedule: str, warmup: int, total: int):
    """Multiplier of the base learning rate at a given step (linear warmup, then the schedule)."""

    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return factor


@dataclass
class Rollouts:
    """One step's samples, flattened prompt-major: item i*G + j is completion j of prompt i."""

    examples: list[Example]
    completions: list[Completion]
    rewards: torch.Tensor  # [B, G], NaN = unscorable
    advantages: torch.Tensor  # [B * G]
    components: dict[str, BatchScores]  # each reward component's results (scores, extracted answers...)
    verifier_failures: dict[str, int]

    @property
    def component_scores(self) -> dict[str, list[float | None]]:
        return {k: b.scores for k, b in self.components.items()}


class GRPOTrainer:
    """Owns the models, optimiser and run folder; :meth:`train` runs the loop above."""

    def __init__(self, cfg: TrainConfig, run_dir: str | Path) -> None:
        validate(cfg)
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if cfg.trainer.num_threads:
            torch.set_num_threads(cfg.trainer.num_threads)
        seed_everything(cfg.trainer.seed)
        self.task = Task(cfg.task)
        self.reward = CompositeReward(reward_specs(cfg.task.rewards), none_policy=cfg.task.none_policy)
        self.pool = WorkerPool(cfg.rollout.reward_workers)
        self.sampling = SamplingConfig(
            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
            max_new_tokens=cfg.rollout.max_new_tokens, stop=list(cfg.rollout.stop),
        )
        self.resume_from = ckpt.latest_checkpoint(self.run_dir) if cfg.trainer.resume else None
        if cfg.trainer.resume and self.resume_from is None:
            log.warning("trainer.resume=true but %s holds no complete checkpoint; starting fresh", self.run_dir)
        if self.resume_from is not None:
            self.model, self.tokenizer = load_pretrained(str(self.resume_from), device=cfg.model.device,
                                                         dtype=cfg.model.dtype)
        else:
            self.model, self.tokenizer = load_model(cfg.model)
        self.device = next(self.model.parameters()).device
        self.engine = make_engine(cfg.rollout.backend, self.model, self.tokenizer, batch_size=cfg.rollout.batch_size)
        self.train_examples = self.task.examples(cfg.task.train_split, self.tokenizer)
        self.eval_examples = (
            self.task.examples(cfg.task.eval_split, self.tokenizer)[: cfg.evaluation.num_examples]
            if cfg.evaluation.enabled and cfg.task.eval_split else []
        )
        self.sampler = PromptSampler(len(self.train_examples), cfg.trainer.seed)
        self.ref_model: Any | None = None
        self.step = 0

    # -- set-up phases ------------------------------------------------------------------------------
    def _warm_start(self) -> dict[str, Any] | None:
        w = self.cfg.warmstart
        if not w.enabled or self.resume_from is not None:
            return None
        log.info("[warm start] supervised phase on the task's references (target probe accuracy %.2f)",
                 w.stop_at_accuracy)
        result = supervised_warm_start(
            self.model, self.tokenizer, self.engine, self.train_examples, w, self.reward, self.sampling,
            seed=self.cfg.trainer.seed, timeout=self.cfg.rollout.reward_timeout, pool=self.pool,
        )
        log.info("[warm start] stopped after %d steps at probe accuracy %.3f", result.steps, result.probe_accuracy)
        return {"steps": result.steps, "probe_accuracy": result.probe_accuracy, "history": result.history}

    def _setup_reference(self) -> None:
        """pi_ref = the policy as RL starts; not loaded at all when beta == 0."""
        if self.cfg.algo.beta == 0.0:
            return
        ref_dir = self.run_dir / "reference"
        if self.resume_from is not None:
            if not (ref_dir / "config.json").exists():
                raise FileNotFoundError(f"cannot resume with beta > 0: the reference policy {ref_dir} is missing")
            self.ref_model, _ = load_pretrained(str(ref_dir), device=self.cfg.model.device, dtype=self.cfg.model.dtype)
        else:
            self.ref_model = copy.deepcopy(self.model)
            ckpt.atomic_directory_write(ref_dir, lambda tmp: (self.ref_model.save_pretrained(tmp),
                                                              self.tokenizer.save_pretrained(tmp)))
        self.ref_model.eval().requires_grad_(False)

    def _setup_optimizer(self) -> None:
        a = self.cfg.algo
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=a.learning_rate, weight_decay=a.weight_decay,
                                           betas=(a.adam_beta1, a.adam_beta2))
        total = self.cfg.trainer.steps * a.num_iterations
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                           lr_lambda(a.lr_schedule, a.lr_warmup_steps, total))
        if self.resume_from is not None:
            state = ckpt.load_trainer_state(self.resume_from)
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.sampler.load_state_dict(state["sampler"])
            self.step = state["step"]
            ckpt.set_rng_state(state["rng"])
            log.info("resumed from %s at step %d", self.resume_from, self.step)

    # -- one step -------------------------------------------------------------------------------------
    def rollout(self) -> Rollouts:
        """Sample G completions per prompt, score them, compute advantages."""
        a = self.cfg.algo
        examples = [self.train_examples[i] for i in self.sampler.next(a.prompts_per_step)]
        groups = self.engine.generate([e.prompt for e in examples], a.group_size, self.sampling,
                                      seed=self.cfg.trainer.seed * 1_000_003 + self.step)
        completions = [c for g in groups for c in g]
        refs = [e.reference for e in examples for _ in range(a.group_size)]
        fields = [{**e.fields, "num_completion_tokens": c.num_tokens}
                  for e, g in zip(examples, groups) for c in g]
        scored = self.reward.score([c.text for c in completions], refs, fields,
                                   timeout=self.cfg.rollout.reward_timeout, pool=self.pool)
        rewards = torch.tensor([math.nan if r is None else r for r in scored.rewards],
                               dtype=torch.float32).view(len(examples), a.group_size)  # [B, G]
        adv_options: dict[str, Any] = {"eps": a.adv_eps}
        if a.advantage == "grpo":
            adv_options["std"] = a.std
        advantages = compute_advantages(rewards, a.advantage, **adv_options).reshape(-1)  # [B*G]
        failures = {
            "timeouts": sum(b.num_timeouts for b in scored.components.values()),
            "errors": sum(b.num_errors for b in scored.components.values()),
            "unscorable": sum(b.num_unscorable for b in scored.components.values()),
        }
        return Rollouts(examples, completions, rewards, advantages, scored.components, failures)

    @torch.no_grad()
    def _frozen_logprobs(self, model: Any, prompts: Sequence[Sequence[int]], comps: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Per-sequence log-probs (1-D tensors, one per completion) under a frozen model."""
        out: list[torch.Tensor] = []
        mb, group = self._micro_batch()
        for s in range(0, len(prompts), mb):
            packed = pack(prompts[s:s + mb], comps[s:s + mb], self.tokenizer.pad_token_id).to(self.device)
            logp, _ = completion_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_start,
                                          self.sampling.temperature, group_size=group)
            for row, c in zip(logp, comps[s:s + mb]):
                out.append(row[: len(c)].float().cpu())
        return out

    def _micro_batch(self) -> tuple[int, int]:
        """(rows per micro-batch, rows sharing a prompt). With the shared-prompt forward a
        micro-batch holds whole groups: max(1, micro_batch_size // G) prompts x G completions."""
        a = self.cfg.algo
        if not self.cfg.trainer.shared_prompt_forward or a.group_size == 1:
            return a.micro_batch_size, 1
        return a.group_size * max(1, a.micro_batch_size // a.group_size), a.group_size

    def update(self, ro: Rollouts) -> dict[str, float]:
        """mu optimisation steps on -J(theta) over this step's rollouts."""
        a = self.cfg.algo
        prompts = [c.prompt_token_ids for c in ro.completions]
        comps = [c.token_ids if c.token_ids else [self.tokenizer.eos_token_id] for c in ro.completions]
        n = len(comps)
        if a.num_iterations > 1:
            self.model.eval()
            old = self._frozen_logprobs(self.model, prompts, comps)
        else:
            old = None  # mu == 1: pi_old == pi_theta, the ratio is exactly 1 (detached copy below)
        ref = self._frozen_logprobs(self.ref_model, prompts, comps) if self.ref_model is not None else None
        self.model.train()
        total_tokens = float(sum(len(c) for c in comps))
        max_tokens = float(self.sampling.max_new_tokens)
        stats: dict[str, list[float]] = {k: [] for k in ("loss", "policy", "kl", "clip_low", "clip_high", "ratio",
                                                          "entropy", "grad_norm")}
        mb, group = self._micro_batch()
        for _ in range(a.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for s in range(0, n, mb):
                e = min(n, s + mb)
                packed = pack(prompts[s:e], comps[s:e], self.tokenizer.pad_token_id).to(self.device)
                logp, entropy = completion_logprobs(self.model, packed.input_ids, packed.attention_mask,
                                                    packed.completion_start, self.sampling.temperature,
                                                    with_entropy=True, group_size=group)
                mask = packed.completion_mask
                old_logp = logp.detach() if old is None else _pad_rows(old[s:e], mask.shape[1]).to(self.device)
                ref_logp = None if ref is None else _pad_rows(ref[s:e], mask.shape[1]).to(self.device)
                out = grpo_loss(
                    logp, old_logp, ref_logp, ro.advantages[s:e].to(self.device), mask,
                    beta=a.beta, eps_low=a.eps_low, eps_high=a.eps_high, aggregation=a.loss_aggregation,
                    num_tokens=total_tokens, max_tokens=max_tokens,
                )
                weight = microbatch_weight(a.loss_aggregation, e - s, n)
                (out.loss * weight).backward()
                share = (e - s) / n
                for key, value in (("loss", float(out.loss.detach()) * weight / share), ("policy", out.policy_loss),
                                   ("kl", out.kl), ("clip_low", out.clip_low_fraction),
                                   ("clip_high", out.clip_high_fraction), ("ratio", out.ratio_mean),
                                   ("entropy", float((entropy * mask).sum() / mask.sum().clamp(min=1)))):
                    stats[key].append(value * share)
            if a.max_grad_norm > 0:
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), a.max_grad_norm)
            else:
                grad_norm = torch.sqrt(sum((p.grad.detach() ** 2).sum() for p in self.model.parameters()
                                           if p.grad is not None))
            stats["grad_norm"].append(float(grad_norm) * a.num_iterations)
            self.optimizer.step()
            self.scheduler.step()
        mu = a.num_iterations
        return {
            "loss/total": sum(stats["loss"]) / mu,
            "loss/policy": sum(stats["policy"]) / mu,
            "kl/mean": sum(stats["kl"]) / mu,
            "clip/low_fraction": sum(stats["clip_low"]) / mu,
            "clip/high_fraction": sum(stats["clip_high"]) / mu,
            "ratio/mean": sum(stats["ratio"]) / mu,
            "entropy/mean": sum(stats["entropy"]) / mu,
            "grad/norm": sum(stats["grad_norm"]) / mu,
            "lr": self.scheduler.get_last_lr()[0],
        }

    # -- the loop -------------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        cfg = self.cfg
        (self.run_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=str))
        summary: dict[str, Any] = {"run_dir": str(self.run_dir)}
        warm = self._warm_start()
        if warm is not None:
            summary["warm_start"] = warm
        self._setup_reference()
        self._setup_optimizer()
        logger = MetricsLogger(self.run_dir, tensorboard=cfg.trainer.tensorboard,
                               resume_step=self.step if self.resume_from is not None else None)
        before_path = self.run_dir / "eval_before.json"
        if self.eval_examples and not before_path.exists():
            before = self.evaluate()
            ckpt.atomic_write_text(before_path, json.dumps(before, indent=2))
            log.info("[eval before GRPO] %s", before)
        progress = _progress(cfg.trainer.progress_bar, cfg.trainer.steps, self.step)
        try:
            while self.step < cfg.trainer.steps:
                t0 = time.perf_counter()
                ro = self.rollout()
                t1 = time.perf_counter()
                metrics = self.update(ro)
                t2 = time.perf_counter()
                self.step += 1
                metrics.update(self._rollout_metrics(ro))
                metrics.update({"time/rollout": t1 - t0, "time/update": t2 - t1, "time/step": t2 - t0,
                                "throughput/completion_tokens_per_s": metrics["completion/tokens"] / max(t2 - t0, 1e-9)})
                if cfg.evaluation.every and self.eval_examples and self.step % cfg.evaluation.every == 0:
                    metrics.update({f"eval/{k}": v for k, v in self.evaluate().items()})
                logger.log(self.step, metrics)
                if cfg.trainer.log_completions:
                    logger.log_completions(self.step, self._completion_rows(ro))
                if cfg.trainer.save_every and self.step % cfg.trainer.save_every == 0 and self.step < cfg.trainer.steps:
                    self.save()
                if progress is not None:
                    progress.update(1)
                    progress.set_postfix(reward=f"{metrics['reward/mean']:.3f}", acc=f"{metrics['accuracy/train']:.2f}",
                                         s_per_step=f"{t2 - t0:.2f}")
        finally:
            if progress is not None:
                progress.close()
            logger.close()
        final = self.save()
        summary["final_checkpoint"] = str(final)
        if self.eval_examples:
            after = self.evaluate()
            ckpt.atomic_write_text(self.run_dir / "eval_after.json", json.dumps(after, indent=2))
            summary["eval_before"] = json.loads(before_path.read_text())
            summary["eval_after"] = after
        plot = plot_training_curves(read_metrics(self.run_dir / "metrics.jsonl"), self.run_dir / "reward_curve.png")
        summary["plot"] = str(plot) if plot else None
        ckpt.atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        return summary

    def evaluate(self) -> dict[str, float]:
        result = evaluate_heldout(self.engine, self.eval_examples, self.reward, self.sampling,
                                  self.cfg.evaluation.samples_per_problem, seed=self.cfg.trainer.seed,
                                  timeout=self.cfg.rollout.reward_timeout, pool=self.pool)
        self.model.train()
        return result.as_dict()

    def save(self) -> Path:
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                 "sampler": self.sampler.state_dict()}
        return ckpt.save_checkpoint(self.run_dir, self.step, self.model, self.tokenizer, state,
                                    keep=self.cfg.trainer.keep_checkpoints)

    def close(self) -> None:
        self.pool.close()

    # -- logging helpers ------------------------------------------------------------------------------
    def _rollout_metrics(self, ro: Rollouts) -> dict[str, float]:
        valid = ~torch.isnan(ro.rewards)
        flat = ro.rewards[valid]
        lengths = [c.num_tokens for c in ro.completions]
        first = self.reward.specs[0].key
        acc_scores = ro.component_scores[first]
        out = {
            "reward/mean": float(flat.mean()) if flat.numel() else math.nan,
            "reward/std": float(flat.std(unbiased=False)) if flat.numel() else math.nan,
            "reward/unscorable_fraction": float((~valid).float().mean()),
            "accuracy/train": sum(is_correct(s) for s in acc_scores) / len(acc_scores),
            "groups/zero_std_fraction": zero_std_fraction(ro.rewards),
            "advantage/abs_mean": float(ro.advantages.abs().mean()),
            "completion/length_mean": sum(lengths) / len(lengths),
            "completion/length_max": max(lengths),
            "completion/truncated_fraction": sum(c.finish_reason == "length" for c in ro.completions) / len(lengths),
            "completion/tokens": sum(lengths),
            "verifier/timeouts": ro.verifier_failures["timeouts"],
            "verifier/errors": ro.verifier_failures["errors"],
            "verifier/unscorable": ro.verifier_failures["unscorable"],
        }
        for key, scores in ro.component_scores.items():
            vals = [s for s in scores if s is not None]
            out[f"reward/{key}"] = sum(vals) / len(vals) if vals else math.nan
        return out

    def _completion_rows(self, ro: Rollouts) -> list[dict[str, Any]]:
        g = self.cfg.algo.group_size
        rows = []
        for i, c in enumerate(ro.completions):
            ex = ro.examples[i // g]
            r = ro.rewards.view(-1)[i]
            rows.append({
                "example_id": ex.id, "prompt": ex.prompt, "completion": c.text, "reference": str(ex.reference),
                "reward": None if torch.isnan(r) else float(r), "advantage": float(ro.advantages[i]),
                "scores": {k: b.results[i].score for k, b in ro.components.items()},
                "verifier_info": {k: dict(b.results[i].info) for k, b in ro.components.items()},
                "finish_reason": c.finish_reason, "num_tokens": c.num_tokens,
            })
        return rows


def _pad_rows(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _progress(enabled: bool, total: int, initial: int):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="GRPO", unit="step", dynamic_ncols=True)
