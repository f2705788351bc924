"""Retention: the policy's held-out accuracy on a SECOND task, before and after training.

RL on one task may cost accuracy on others; "RL's Razor" (arXiv 2509.04259) predicts that
forgetting from the forward KL to the base model (``kl/base_forward``, reasoning_rl.evaluation.kl_to_base),
and this measures the forgetting itself. With ``evaluation.retention.task`` set, every held-out
evaluation of the run (before training, after it, and every ``evaluation.every`` steps) also
evaluates the policy on the first ``evaluation.retention.num_examples`` problems of that task's
evaluation split, with :func:`reasoning_rl.evaluation.heldout.evaluate_heldout`: the same code, verifier rule
and statistics as the training task's held-out accuracy (greedy, sampled, Pass@K, Maj@K). Its
results are the held-out keys prefixed with ``retention/`` (``retention/greedy_accuracy``) in
``eval_before.json``, ``eval_after.json``, ``summary.json`` and, during training, ``eval/retention/*``.

How the second task is asked and scored:

- prompts: its definition's template, rendered as the training task renders its own (``task.use_chat_template``,
  ``task.system_prompt``), so the policy is asked the way it is trained;
- reward: its definition's verifier alone (with its options), timed out after its ``score_timeout``;
- sampling: the training temperature, top-p and top-k; ``max_new_tokens`` and ``stop`` from
  :class:`RetentionConfig` (null: the definition's stop strings with raw prompts, else ``rollout.stop``).

Cost: one greedy and ``samples_per_problem`` sampled completions per problem at each evaluation; the
log states the seconds of each (docs/objectives.md gives a measured figure).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reasoning_rl.errors import UserError
from reasoning_rl.evaluation.heldout import evaluate_heldout
from reasoning_rl.reward_guard import RewardGuard
from reasoning_rl.rollouts.sampling import RolloutEngine, SamplingConfig
from reasoning_rl.settings.evaluation import RetentionConfig
from reasoning_rl.tasks.data import load_problems, local_path
from reasoning_rl.tasks.definition import DatasetDefinition, get_definition
from reasoning_rl.tasks.task import Example, Task
from rewards.compose import CompositeReward
from rewards.pool import WorkerPool
from rewards.specs import RewardSpec

__all__ = ["PREFIX", "Retention", "retention_definition", "retention_problems", "retention_rows"]

log = logging.getLogger(__name__)

PREFIX = "retention/"
"""Prefix of the retention keys in the held-out results."""


def retention_definition(cfg: RetentionConfig) -> DatasetDefinition | None:
    """The second task's definition (None when off); an unknown name is a UserError listing the known ones."""
    return None if cfg.task is None else get_definition(cfg.task, kind="task")


def retention_problems(cfg: RetentionConfig, evaluation_enabled: bool, data_dir: str | None = None) -> list[str]:
    """What stops ``evaluation.retention`` from running, one line each, checked before the run starts: an
    unknown task, a split it lacks, no local copy where ``task.data_dir`` needs one, held-out evaluation off."""
    if cfg.task is None:
        return []
    where = "evaluation.retention.task"
    try:
        definition = get_definition(cfg.task, kind="task")
        split = cfg.split or definition.eval_split
        if split is None:
            return [f"{where}={cfg.task!r} names no evaluation split; set evaluation.retention.split to one of "
                    f"{', '.join(definition.splits)}"]
        local_path(definition, split, data_dir, cfg.data_file)  # an unknown split lists the known ones
    except UserError as exc:
        return [f"{where}: {exc}"]
    if not evaluation_enabled:
        return [f"{where}={cfg.task!r} needs evaluation.enabled=true: retention is measured with the held-out "
                "evaluation; turn it on or set evaluation.retention.task=null"]
    return []


@dataclass
class Retention:
    """The second task's problems, reward and sampling, ready to evaluate; empty (``{}``) when off."""

    examples: list[Example] = field(default_factory=list)
    reward: CompositeReward | None = None
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    samples_per_problem: int = 1
    timeout: float = 10.0

    @classmethod
    def build(cls, cfg: RetentionConfig, task: Task, tokenizer: Any, sampling: SamplingConfig) -> Retention:
        """Load the second task's problems (prompted as ``task`` prompts its own) and its verifier."""
        definition = retention_definition(cfg)
        if definition is None:
            return cls()
        problems, _ = load_problems(definition, cfg.split or definition.eval_split, data_dir=task.cfg.data_dir,
                                    data_file=cfg.data_file, limit=cfg.num_examples)
        examples = [Example(p.task_id, task.render_prompt(p.prompt, tokenizer), p.reference, p.fields)
                    for p in problems]
        verifier = definition.verifier
        reward = CompositeReward([RewardSpec(name=verifier.name, options=dict(verifier.options))])
        raw_stop = list(definition.stop) if definition.stop and not task.cfg.use_chat_template else None
        stop = cfg.stop if cfg.stop is not None else (raw_stop if raw_stop is not None else list(sampling.stop))
        return cls(examples, reward, dataclasses.replace(sampling, max_new_tokens=cfg.max_new_tokens or
                                                         sampling.max_new_tokens, stop=stop),
                   cfg.samples_per_problem, definition.score_timeout)

    def evaluate(self, engine: RolloutEngine, seed: int, pool: WorkerPool | None = None,
                 guard: RewardGuard | None = None) -> dict[str, float]:
        """``retention/<key>`` for each key of :meth:`reasoning_rl.evaluation.heldout.HeldOutResult.as_dict`; {} when off.
        ``guard`` stops the run when the second task's verifier fails on too many samples."""
        if not self.examples or self.reward is None:
            return {}
        t0 = time.perf_counter()
        result = evaluate_heldout(engine, self.examples, self.reward, self.sampling, self.samples_per_problem,
                                  seed=seed, timeout=self.timeout, pool=pool, guard=guard)
        log.info("retention: %d problems x (1 greedy + %d sampled) in %.1f s, greedy accuracy %.3f",
                 result.num_problems, self.samples_per_problem, time.perf_counter() - t0, result.greedy_accuracy)
        return {f"{PREFIX}{k}": v for k, v in result.as_dict().items()}


def retention_rows(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Rows of the end-of-run held-out table (``| label | before | after | change |``) for the retention
    accuracies, when the run measured them."""
    rows = []
    problems, n = after.get(PREFIX + "num_problems"), after.get(PREFIX + "samples_per_problem")
    for key, label in ((f"{PREFIX}greedy_accuracy", f"retention greedy ({problems} problems)"),
                       (f"{PREFIX}sampled_accuracy", f"retention sampled (n={n})")):
        b, a = before.get(key), after.get(key)
        if isinstance(b, (int, float)) and isinstance(a, (int, float)):
            rows.append(f"| {label} | {b:.1%} | {a:.1%} | {a - b:+.1%} |")
    return rows
