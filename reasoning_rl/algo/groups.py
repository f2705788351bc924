"""Sample n completions for each prompt from the current policy and score them.

Shared by every algorithm that learns from its own samples (GRPO's groups of G,
PPO's single samples, online RFT): the completions keep their token ids as sampled,
the reward is the task's composite reward (worker processes, hard timeouts), and
"cannot score" stays NaN so an estimator can leave it out instead of reading a 0.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from reasoning_rl import distributed
from reasoning_rl.algo.base import RunContext
from reasoning_rl.reward_guard import TRAINING
from reasoning_rl.rollouts.sampling import Completion
from reasoning_rl.tasks import Example
from reasoning_rl.tasks.scoring import is_correct
from rewards.audit import AuditReport, PendingAudit, VerifierAudit, merge
from rewards.batch import BatchScores


@dataclass
class ScoredGroups:
    """One step's samples, flattened prompt-major: item i*n + j is completion j of prompt i."""

    examples: list[Example]
    completions: list[Completion]
    rewards: torch.Tensor  # [B, n], NaN = unscorable
    components: dict[str, BatchScores]
    """Each reward component's results (scores, extracted answers, ...)."""
    verifier_failures: dict[str, int]
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall seconds of the phases that produced these samples: ``generate`` and ``reward``."""
    tamper_kinds: tuple[str, ...] = ()
    """Tamper kinds the reward's verifiers report (a verifier's ``tamper_kinds``: the code
    verifier's sandbox); each is logged as ``reward/tamper/<kind>``, zero included."""
    audit: AuditReport | PendingAudit | None = None
    """The verifier audit of these samples (``task.audit``, still running when pending), None when it is off."""

    @property
    def group_size(self) -> int:
        return self.rewards.shape[1]

    @property
    def component_scores(self) -> dict[str, list[float | None]]:
        return {k: b.scores for k, b in self.components.items()}


def sample_and_score(ctx: RunContext, examples: list[Example], n: int, seed: int) -> ScoredGroups:
    """``n`` completions per example from ``ctx.engine``, scored by ``ctx.reward``."""
    t0 = time.perf_counter()
    groups = ctx.engine.generate([e.prompt for e in examples], n, ctx.sampling, seed=seed)
    t1 = time.perf_counter()
    completions = [c for g in groups for c in g]
    refs = [e.reference for e in examples for _ in range(n)]
    fields = [{**e.fields, "num_completion_tokens": c.num_tokens} for e, g in zip(examples, groups) for c in g]
    scored = ctx.reward.score([c.text for c in completions], refs, fields,
                              timeout=ctx.cfg.rollout.reward_timeout, pool=ctx.pool)
    ctx.reward_guard.observe(TRAINING, scored.components)  # stops the run on a broken verifier
    # An episode's environment may scale its reward (code_feedback's attempt_discount); 1 otherwise.
    rewards = torch.tensor([math.nan if r is None else r * getattr(c, "reward_scale", 1.0)
                            for r, c in zip(scored.rewards, completions)],
                           dtype=torch.float32).view(len(examples), n)  # [B, n]
    failures = {
        "timeouts": sum(b.num_timeouts for b in scored.components.values()),
        "errors": sum(b.num_errors for b in scored.components.values()),
        "unscorable": sum(b.num_unscorable for b in scored.components.values()),
    }
    seconds = {"generate": t1 - t0, "reward": time.perf_counter() - t1}
    audit = _audit(ctx, [c.text for c in completions], refs, fields,
                   scored.components[ctx.reward.specs[0].key].results, seed,
                   [e.id for e in examples for _ in range(n)])
    return ScoredGroups(examples, completions, rewards, scored.components, failures, seconds,
                        tamper_kinds(ctx.reward.verifiers.values()), audit)


def _audit(ctx: RunContext, texts: list[str], refs: list[Any], fields: list[dict[str, Any]], ours: list[Any],
           seed: int, example_ids: list[str]) -> PendingAudit | None:
    """``task.audit``: re-score a seeded sample with the second verifier; disagreements to audit.jsonl."""
    cfg = getattr(ctx.cfg.task, "audit", None)
    if cfg is None or cfg.verifier is None:
        return None

    def write_rows(report: AuditReport) -> None:
        if report.rows and distributed.is_main():
            with open(ctx.run_dir / "audit.jsonl", "a", encoding="utf-8") as f:
                for row in report.rows:
                    f.write(json.dumps({"seed": seed, "example_id": example_ids[row["index"]], **row}, default=str)
                            + "\n")

    # Scored in the reward pool while the step goes on; rollout_metrics collects it (rewards/audit.py).
    return VerifierAudit(cfg).submit(texts, refs, fields, ours, seed, timeout=ctx.cfg.rollout.reward_timeout,
                                     pool=ctx.pool, on_done=write_rows)


def tamper_kinds(verifiers: Any) -> tuple[str, ...]:
    """The tamper kinds any of ``verifiers`` reports (their ``tamper_kinds`` attribute), in order."""
    kinds: list[str] = []
    for verifier in verifiers:
        kinds += [k for k in getattr(verifier, "tamper_kinds", ()) if k not in kinds]
    return tuple(kinds)


def _tampered(ro: ScoredGroups, i: int) -> list[str]:
    """The tamper kinds any component's verifier reported for completion ``i``, sorted."""
    return sorted({k for b in ro.components.values() for k in b.results[i].info.get("tamper", ())})


def rollout_metrics(ro: ScoredGroups, accuracy_component: str) -> dict[str, float]:
    """Reward, accuracy, length and verifier-failure metrics of one step's samples (docs/metrics.md)."""
    valid = ~torch.isnan(ro.rewards)
    flat = ro.rewards[valid]
    lengths = [c.num_tokens for c in ro.completions]
    acc_scores = ro.component_scores[accuracy_component]
    out = {
        "reward/mean": float(flat.mean()) if flat.numel() else math.nan,
        "reward/std": float(flat.std(unbiased=False)) if flat.numel() else math.nan,
        "reward/unscorable_fraction": float((~valid).float().mean()),
        "accuracy/train": sum(is_correct(s) for s in acc_scores) / len(acc_scores),
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
    if ro.tamper_kinds:
        flagged = [_tampered(ro, i) for i in range(len(ro.completions))]
        for kind in ro.tamper_kinds:
            out[f"reward/tamper/{kind}"] = sum(kind in kinds for kinds in flagged)
    if ro.audit is not None:
        out.update(ro.audit.metrics)
    return out


def completion_rows(ro: ScoredGroups, advantages: torch.Tensor | None = None) -> list[dict[str, Any]]:
    """One ``completions.jsonl`` row per completion: text, reward, advantage, each component's verdict."""
    n = ro.group_size
    flat_rewards = ro.rewards.view(-1)
    rows = []
    for i, c in enumerate(ro.completions):
        ex = ro.examples[i // n]
        r = flat_rewards[i]
        rows.append({
            "example_id": ex.id, "prompt": ex.prompt, "completion": c.text, "reference": str(ex.reference),
            "reward": None if torch.isnan(r) else float(r),
            "advantage": None if advantages is None else float(advantages[i]),
            "scores": {k: b.results[i].score for k, b in ro.components.items()},
            "verifier_info": {k: dict(b.results[i].info) for k, b in ro.components.items()},
            "finish_reason": c.finish_reason, "num_tokens": c.num_tokens,
            **({"tamper": _tampered(ro, i)} if ro.tamper_kinds else {}),
            **episode_fields(c),
        })
    return rows


def episode_fields(c: Completion) -> dict[str, Any]:
    """A multi-turn episode's parts for its ``completions.jsonl`` row (docs/tools.md); {} for a
    single-turn completion. ``turns``: role (``sampled`` / ``observation``), text, token span
    ``[start, end)`` in the completion's tokens, and for a turn the environment answered its tool
    status and step reward, ``trained: false`` on a retry group's shared first turn;
    ``loss_mask_spans``: the ``[start, end)`` spans the loss trains on; ``reward_scale``: the
    environment's factor on the reward."""
    turns = getattr(c, "turns", None)
    if turns is None:
        return {}
    spans: list[list[int]] = []
    for k, m in enumerate(c.loss_mask or [1] * c.num_tokens):
        if m and spans and spans[-1][1] == k:
            spans[-1][1] = k + 1
        elif m:
            spans.append([k, k + 1])
    return {"turns": [{"role": t.role, "text": t.text, "tokens": [t.start, t.end],
                       **({"tool": t.tool, "step_reward": t.reward} if t.tool != "none" or t.reward is not None
                          else {}),
                       **({} if t.trained else {"trained": False})} for t in turns],
            "loss_mask_spans": spans, "reward_scale": getattr(c, "reward_scale", 1.0)}


def informative_groups(rewards: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """Groups whose valid rewards are not all equal (the others have zero advantage).  # [B] bool"""
    valid = ~torch.isnan(rewards)
    filled_hi = torch.where(valid, rewards, -math.inf).amax(dim=1)
    filled_lo = torch.where(valid, rewards, math.inf).amin(dim=1)
    return (valid.sum(dim=1) >= 2) & ((filled_hi - filled_lo) > tol)


def _batch_of(results: list, seconds: float) -> BatchScores:
    return BatchScores(results=results, num_timeouts=sum(r.status == "timeout" for r in results),
                       num_errors=sum(r.status == "error" for r in results),
                       num_unscorable=sum(r.status == "unscorable" for r in results), seconds=seconds)


def select_groups(parts: list[ScoredGroups], keep: list[tuple[int, int]]) -> ScoredGroups:
    """The groups ``keep`` = [(part, group index), ...] of several sampling rounds, as one batch.
    Verifier failures count every scored sample, kept or not (they happened)."""
    n = parts[0].group_size
    examples = [parts[p].examples[g] for p, g in keep]
    completions = [c for p, g in keep for c in parts[p].completions[g * n:(g + 1) * n]]
    rewards = torch.stack([parts[p].rewards[g] for p, g in keep]) if keep else parts[0].rewards[:0]
    components = {
        key: _batch_of([r for p, g in keep for r in parts[p].components[key].results[g * n:(g + 1) * n]],
                       sum(pt.components[key].seconds for pt in parts))
        for key in parts[0].components
    }
    failures = {k: sum(pt.verifier_failures[k] for pt in parts) for k in parts[0].verifier_failures}
    seconds = {k: sum(pt.seconds.get(k, 0.0) for pt in parts) for k in parts[0].seconds}
    audit = merge([pt.audit for pt in parts if pt.audit is not None]) if parts[0].audit is not None else None
    return ScoredGroups(examples, completions, rewards, components, failures, seconds, parts[0].tamper_kinds, audit)
