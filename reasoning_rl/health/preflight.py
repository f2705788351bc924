"""Preflight: the first batch, sampled and scored before any update, read for the failures that
waste a whole run: completions cut at the token limit, groups without reward variance, answers the
verifier cannot score, prompts too long for the model's context. Each is warned about in one log line
with the setting to change, written to health.jsonl as a ``preflight`` row at step 0 and listed in
status.json's ``preflight``.

The batch is step 1's own: the prompts the sampler gives step 1 (read ahead without advancing it) and
step 1's sampling seed, with every random generator's state restored afterwards, so training goes on
exactly as without the preflight (step 1 samples the same batch again: one extra rollout's time). The
verifier audit is not run on it. Skipped on resume, under torchrun, with asynchronous rollouts and for
algorithms that sample no groups (``trainer.health.preflight=false`` turns it off)."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reasoning_rl import distributed
from reasoning_rl.algo.advantages import zero_std_fraction
from reasoning_rl.algo.batch import step_seed
from reasoning_rl.algo.groups import rollout_metrics, sample_and_score
from reasoning_rl.health.rules import RULES
from reasoning_rl.run_folder.status import update_status

log = logging.getLogger("reasoning_rl.health")

CHECKS: tuple[tuple[str, str, str], ...] = (
    ("truncation", "completion/truncated_fraction", "raise rollout.max_new_tokens or ask for shorter answers"),
    ("zero_variance", "groups/zero_std_fraction", "warmstart.enabled=true, a larger algo.group_size or easier data"),
    ("unscorable", "reward/unscorable_fraction", "check task.prompt_template's answer format"),
)
"""(rule, metric, setting to change): read once on the first batch against the rule's threshold in RULES."""


def first_batch_metrics(ctx: Any, cfg: Any) -> dict[str, float]:
    """Step 1's batch, sampled and scored with every RNG state restored afterwards: its rollout metrics,
    ``groups/zero_std_fraction`` and ``prompt/length_max`` (tokens)."""
    indices = ctx.sampler.upcoming(cfg.algo.prompts_per_step, 1)[0]
    examples = [ctx.train_examples[i] for i in indices]
    quiet = dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, audit=type(cfg.task.audit)()))
    states = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
              random.getstate(), np.random.get_state())
    try:
        ro = sample_and_score(dataclasses.replace(ctx, cfg=quiet), examples, cfg.algo.samples_per_prompt(),
                              seed=step_seed(cfg.trainer.seed, 0))
    finally:
        torch.set_rng_state(states[0])
        if states[1] is not None:
            torch.cuda.set_rng_state_all(states[1])
        random.setstate(states[2])
        np.random.set_state(states[3])
        getattr(ctx.engine, "pop_metrics", dict)()  # its timings are not step 1's
    metrics = rollout_metrics(ro, ctx.reward.specs[0].key)
    metrics["groups/zero_std_fraction"] = zero_std_fraction(ro.rewards)
    metrics["prompt/length_max"] = max(len(ctx.tokenizer(e.prompt).input_ids) for e in examples)
    return metrics


def preflight_warnings(metrics: dict[str, float], max_new_tokens: int, context: int | None) -> list[dict[str, Any]]:
    """The checks that fail on the first batch's ``metrics``, each as a health.jsonl row (step 0)."""
    threshold = {r.name: r.threshold for r in RULES}
    out = []
    for rule, key, setting in CHECKS:
        value = metrics.get(key)
        if value is not None and value > threshold[rule]:
            out.append({"step": 0, "rule": rule, "event": "preflight", "value": value, "threshold": threshold[rule],
                        "keys": [key], "advice": f"the first batch has {key}={value:.3g} (over {threshold[rule]:g}) "
                                                 f"before any update: {setting}", "doc": f"docs/health.md#{rule}"})
    longest = metrics.get("prompt/length_max")
    if context is not None and longest is not None and longest + max_new_tokens > context:
        out.append({"step": 0, "rule": "prompt_length", "event": "preflight", "value": longest,
                    "threshold": context - max_new_tokens, "keys": ["prompt/length_max"],
                    "advice": f"the longest first-batch prompt has {longest} tokens; with rollout.max_new_tokens="
                              f"{max_new_tokens} it passes the model's context of {context}: shorten the prompt "
                              f"(task.prompt_template, few-shot examples) or lower rollout.max_new_tokens",
                    "doc": "docs/health.md#preflight"})
    return out


def run_preflight(ctx: Any, cfg: Any, run_dir: Path) -> list[dict[str, Any]]:
    """Sample and read the first batch; log, write and record what it finds. Returns the warning rows."""
    metrics = first_batch_metrics(ctx, cfg)
    context = getattr(getattr(ctx.model, "config", None), "max_position_embeddings", None)
    rows = preflight_warnings(metrics, cfg.rollout.max_new_tokens, context)
    for row in rows:
        log.warning("health preflight: %s: %s [%s]", row["rule"], row["advice"], row["doc"])
    if rows:
        with (Path(run_dir) / "health.jsonl").open("a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    update_status(run_dir, preflight=[{"rule": r["rule"], "value": r["value"], "advice": r["advice"]} for r in rows])
    return rows


def should_run(cfg: Any, ctx: Any, resume_step: int | None) -> bool:
    return (cfg.trainer.health.enabled and cfg.trainer.health.preflight and not resume_step and ctx is not None
            and cfg.algo.capabilities.samples_groups and cfg.rollout.max_staleness == 0 and distributed.world_size() == 1)
