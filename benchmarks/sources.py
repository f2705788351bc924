"""Where an evaluation's completions come from: a rollout engine, or a samples file.

:class:`EngineSource` samples them (one completion per sample, or a multi-turn episode with
``env=``); :class:`SamplesSource` reads them from a JSONL file (:func:`read_samples`, whose errors
name the file, the line and what is wrong). Each source has a ``key`` naming the settings that made
its completions: :func:`benchmarks.evaluate.evaluate` regenerates a cached problem only when it changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.io import iter_jsonl
from reasoning_rl.errors import UserError
from reasoning_rl.settings.task import EpisodeConfig
from reasoning_rl.tasks.data import Problem


def settings_key(obj: Any) -> str:
    """Short stable hash of a JSON-able object (the cache key of a group of settings)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


class CompletionSource:
    """Where completions come from: a rollout engine or a samples file."""

    key: str
    """Identifies the generation settings; cached completions with another key are redone."""

    def completions(self, problems: Sequence[Problem], start_index: int) -> list[list[str]]:
        raise NotImplementedError

    def episode_records(self) -> list[list[dict[str, Any]]] | None:
        """The episodes behind the last :meth:`completions` call (one record per sample,
        :func:`episode_record`), or None when the samples are single completions."""
        return None


@dataclass
class EngineSource(CompletionSource):
    """Completions sampled by a rollout engine (``engine.generate(prompts, n, sampling, seed)``)."""

    engine: Any
    sampling: Any
    n: int
    build_prompt: Callable[[Problem], str]
    seed: int | None = 0
    settings: dict[str, Any] = field(default_factory=dict)
    """Everything that shapes a completion (model, sampling, prompt format); hashed into ``key``."""
    env: str | None = None
    """Environment of multi-turn episodes (``env=``); None = one completion per sample."""
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    """How an episode runs (``episode.*``) when ``env`` is set."""
    tokenizer: Any = None
    """The model's tokenizer: an episode tokenizes its observations (needed with ``env``)."""

    def __post_init__(self) -> None:
        self.key = settings_key(self.settings)
        self._episodes: list[list[dict[str, Any]]] | None = None

    def completions(self, problems: Sequence[Problem], start_index: int) -> list[list[str]]:
        prompts = [self.build_prompt(p) for p in problems]
        # Seeded by position so a chunk gives the same samples whatever ran before it.
        seed = None if self.seed is None else self.seed + start_index
        engine = self.engine
        if self.env is not None:  # the same episode engine training's held-out evaluation runs
            from reasoning_rl.envs.episode import EpisodeEngine
            from reasoning_rl.tasks import Example

            examples = [Example(p.task_id, prompt, p.reference, dict(p.fields)) for p, prompt in zip(problems, prompts)]
            engine = EpisodeEngine(self.engine, self.tokenizer, self.env, self.episode, examples)
        groups = engine.generate(prompts, self.n, self.sampling, seed=seed)
        if self.env is not None:
            self._episodes = [[episode_record(c, self.episode.max_tokens) for c in group] for group in groups]
        return [[c.text for c in group] for group in groups]

    def episode_records(self) -> list[list[dict[str, Any]]] | None:
        return self._episodes


def episode_record(c: Any, max_tokens: int) -> dict[str, Any]:
    """What the results keep of one episode: policy turns, tool calls, errors and timeouts, whether the
    token budget cut it, and the whole text (turns and observations; ``completion`` is what was scored)."""
    sampled = [t for t in c.turns if t.role == "sampled"]
    return {"turns": len(sampled), "tool_calls": sum(t.tool != "none" for t in sampled),
            "tool_errors": sum(t.tool in ("error", "timeout") for t in sampled),
            "tool_timeouts": sum(t.tool == "timeout" for t in sampled),
            "budget_cut": len(c.token_ids) >= max_tokens, "finish_reason": c.finish_reason,
            "text": "".join(t.text for t in c.turns)}


@dataclass
class SamplesSource(CompletionSource):
    """Completions read from a samples file, grouped by ``task_id``."""

    by_task: dict[str, list[str]]

    def __post_init__(self) -> None:
        self.key = "samples"

    def completions(self, problems: Sequence[Problem], start_index: int) -> list[list[str]]:
        return [self.by_task[p.task_id] for p in problems]


class SamplesFileError(UserError, ValueError):
    """A samples file that cannot be scored: the message names the file, the line and what is wrong."""


class SamplesFileNotFound(UserError, FileNotFoundError):
    """``samples=`` names no file."""


def _sample_texts(path: str | Path, lineno: int, rec: Any) -> tuple[str, list[str]]:
    """``(task_id, completions)`` of one line of a samples file, or :class:`SamplesFileError` naming the
    line, what is missing and the fields the line does have."""
    where = f"{path}:{lineno}"
    if not isinstance(rec, dict):
        raise SamplesFileError(f"{where}: a sample is a JSON object with 'task_id' and 'completion', "
                               f"this line holds a JSON {type(rec).__name__}")
    missing = [f for f in ("task_id", "completion") if f not in rec and not (f == "completion" and "completions" in rec)]
    if missing:
        row = f"sample {rec['task_id']!r}" if "task_id" in rec else "the sample"
        raise SamplesFileError(f"{where}: {row} has no {' and no '.join(repr(f) for f in missing)}"
                               f"{' (or a completions list)' if 'completion' in missing else ''}; "
                               f"its fields are {sorted(rec) or 'none'}")
    if "completions" in rec:
        texts = rec["completions"]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise SamplesFileError(f"{where}: 'completions' of sample {rec['task_id']!r} must be a non-empty "
                                   f"list of strings, got {json.dumps(texts)[:80]}")
    else:
        texts = [rec["completion"]]
        if not isinstance(texts[0], str):
            raise SamplesFileError(f"{where}: 'completion' of sample {rec['task_id']!r} must be a string, got a "
                                   f"{type(texts[0]).__name__} ({json.dumps(texts[0])[:80]})")
    return str(rec["task_id"]), texts


def read_samples(path: str | Path, problems: Sequence[Problem]) -> SamplesSource:
    """Group a samples JSONL (``task_id`` + ``completion``, or ``completions`` as a list) by problem.

    Every line must be a JSON object with those fields, every problem needs at least one
    sample, and the samples must belong to the benchmark's problems: a mismatch usually
    means the wrong benchmark or file. Each violation is a :class:`SamplesFileError` naming
    the file, the line where there is one, and what is wrong.
    """
    if not Path(path).is_file():
        raise SamplesFileNotFound(f"samples file {str(path)!r} does not exist")
    by_task: dict[str, list[str]] = {}
    for lineno, rec in iter_jsonl(path, SamplesFileError):
        task_id, texts = _sample_texts(path, lineno, rec)
        by_task.setdefault(task_id, []).extend(texts)
    if not by_task:
        raise SamplesFileError(f"{path}: holds no samples (write one JSON line per problem: "
                               '{"task_id": ..., "completion": ...})')
    wanted = {p.task_id for p in problems}
    extra = [t for t in by_task if t not in wanted]
    if len(extra) == len(by_task):
        raise SamplesFileError(f"{path}: none of its {len(by_task)} task_ids (e.g. {extra[:3]}) is a problem of "
                               f"this benchmark (e.g. {[p.task_id for p in problems[:3]]}); wrong benchmark= or file?")
    missing = [p.task_id for p in problems if p.task_id not in by_task]
    if missing:
        raise SamplesFileError(f"{path}: covers only {len(problems) - len(missing)} of the {len(problems)} problems: "
                               f"no sample for {len(missing)} (e.g. {missing[:3]}); write at least one line per "
                               "problem, or pass limit=N to score the first N problems only")
    return SamplesSource({t: texts for t, texts in by_task.items() if t in wanted})
