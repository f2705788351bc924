"""Samples of the initial policy, drawn once before training: the offline data of RFT and DPO.

DeepSeekMath's RFT and DPO (arXiv 2402.03300, sec. 5.2.1) learn from completions of the
SFT model pi_sft, sampled before training starts; Online RFT and GRPO sample the current
policy every step. To compare them "after the same number of sampled completions", the
offline set here has exactly the budget an online run samples: one slot per training step,
each ``prompts_per_step`` prompts x ``n`` completions of the policy as it stands when the
algorithm is set up (after the warm start: the run's pi_sft), with the same prompt order
and the same sampling seed per slot as an online algorithm's step.

The set is written to ``<run>/offline_samples.jsonl`` (atomically, once complete), so a
resumed run trains on the same data instead of sampling its current policy. In a
data-parallel run each rank samples its shard of every slot's prompts and keeps it in
``offline_samples.rank<r>.jsonl``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from reasoning_rl import distributed
from reasoning_rl.algo.base import RunContext
from reasoning_rl.algo.batch import sample_step, step_seed
from reasoning_rl.algo.groups import ScoredGroups
from reasoning_rl.run_folder.atomic import atomic_write_text
from reasoning_rl.tasks.scoring import is_correct

log = logging.getLogger(__name__)

FILE_NAME = "offline_samples.jsonl"


def rank_file(name: str) -> str:
    """``name`` in a single process; ``<stem>.rank<r><suffix>`` in a data-parallel run, where each
    rank samples and keeps its own shard of the prompts (reasoning_rl.distributed)."""
    if distributed.world_size() == 1:
        return name
    stem, _, suffix = name.rpartition(".")
    return f"{stem}.rank{distributed.rank()}.{suffix}"


@dataclass
class Sample:
    """One completion of the initial policy, as sampled and as the verifier judged it."""

    token_ids: list[int]
    text: str
    reward: float | None
    """The task's composite reward (None = unscorable)."""
    correct: bool
    """The accuracy verifier (the reward's first component) gave its full score: I(o) = 1."""
    scorable: bool
    """The accuracy verifier could score it (a wrong answer is scorable; a timeout is not)."""
    finish_reason: str


@dataclass
class Group:
    """The ``n`` samples of one prompt."""

    example: int
    """Index into the run's training examples."""
    prompt_token_ids: list[int]
    samples: list[Sample]


@dataclass
class OfflineSamples:
    """``slots[s]`` holds the groups training step ``s`` learns from."""

    slots: list[list[Group]] = field(default_factory=list)
    seconds: float = 0.0
    """Wall seconds spent sampling and scoring the set."""

    @property
    def num_completions(self) -> int:
        return sum(len(g.samples) for slot in self.slots for g in slot)

    def accuracy(self) -> float:
        """Share of all samples the verifier accepts: the initial policy's sampled accuracy."""
        samples = [x for slot in self.slots for g in slot for x in g.samples]
        return sum(x.correct for x in samples) / max(1, len(samples))

    def save(self, path: Path) -> None:
        lines = [json.dumps({"slot": s, "groups": [asdict(g) for g in slot]}) for s, slot in enumerate(self.slots)]
        atomic_write_text(path, "\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: Path) -> OfflineSamples:
        slots = []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            slots.append([Group(g["example"], g["prompt_token_ids"], [Sample(**x) for x in g["samples"]])
                          for g in record["groups"]])
        return cls(slots)


def groups_of(scored: ScoredGroups, example_indices: list[int], accuracy_key: str) -> list[Group]:
    """The scored samples as :class:`Group` records, judged by the accuracy component."""
    n = scored.group_size
    verdicts = scored.components[accuracy_key].results
    out = []
    for g, index in enumerate(example_indices):
        samples = []
        for j in range(n):
            i = g * n + j
            c, r = scored.completions[i], float(scored.rewards[g, j])
            samples.append(Sample(token_ids=list(c.token_ids), text=c.text, reward=None if math.isnan(r) else r,
                                  correct=is_correct(verdicts[i].score, verdicts[i].status),
                                  scorable=verdicts[i].status == "ok" and verdicts[i].score is not None,
                                  finish_reason=c.finish_reason))
        out.append(Group(index, list(scored.completions[g * n].prompt_token_ids), samples))
    return out


def offline_samples(ctx: RunContext, prompts_per_step: int, n: int) -> OfflineSamples:
    """The run's offline set: read from the run folder when resuming, else sampled now from the
    current policy (``trainer.steps`` slots) and saved."""
    path = ctx.run_dir / rank_file(FILE_NAME)
    if ctx.resumed:
        if not path.exists():
            raise FileNotFoundError(f"cannot resume algo={ctx.cfg.algo.variant}: its samples of the initial policy "
                                    f"{path} are missing; start a new run folder")
        data = OfflineSamples.load(path)
        if len(data.slots) != ctx.cfg.trainer.steps:
            raise ValueError(f"{path} has {len(data.slots)} slots but trainer.steps={ctx.cfg.trainer.steps}; "
                             "resume with the run's own trainer.steps or start a new run folder")
        return data
    steps, key = ctx.cfg.trainer.steps, ctx.reward.specs[0].key
    log.info("sampling the initial policy: %d steps x %d prompts x %d completions", steps, prompts_per_step, n)
    t0 = time.perf_counter()
    data = OfflineSamples()
    for s in range(steps):
        indices, scored = sample_step(ctx, prompts_per_step, n, step_seed(ctx.cfg.trainer.seed, s))
        data.slots.append(groups_of(scored, indices, key))
        if steps >= 10 and (s + 1) % (steps // 10) == 0:
            log.info("  %d / %d slots sampled (%.0f s)", s + 1, steps, time.perf_counter() - t0)
    data.seconds = time.perf_counter() - t0
    data.save(path)
    log.info("initial policy: %d completions, sampled accuracy %.3f, %.0f s", data.num_completions,
             data.accuracy(), data.seconds)
    return data
