"""Evaluate one (model or samples file, benchmark) pair: generate, score, aggregate, write.

The loop reads top to bottom: get completions (from a rollout engine, or from a
samples file), score them with the benchmark's verifier in worker processes with
a hard time limit, compute the metrics, write ``results.json``.

Work is cached per problem in ``problems.jsonl`` next to the results: a problem
whose completions were made with the same generation settings is not generated
again, and one whose completions were scored by the same verifier (same
benchmark version and options) is not scored again. The cache is rewritten
atomically after every chunk, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from benchmarks.aggregate import (
    compute_metrics,
    distinct_answer_pairs,
    episode_metrics,
    verdict_answer,
    verdict_correct,
    vote_counts,
)
from benchmarks.graders import grader_sensitivity
from benchmarks.io import JsonlError, read_jsonl, write_json, write_jsonl
from benchmarks.sources import CompletionSource, EngineSource, SamplesSource, read_samples, settings_key
from reasoning_rl.errors import UserError
from reasoning_rl.tasks.data import Problem
from reasoning_rl.tasks.definition import DatasetDefinition
from reasoning_rl.tasks.scoring import grade

__all__ = ["CACHE_FILE", "RESULTS_FILE", "CompletionSource", "EngineSource", "SamplesSource", "ScoringSettings",
           "evaluate", "read_samples"]
"""The loop, and the sources it reads completions from (:mod:`benchmarks.sources`)."""

RESULTS_FILE = "results.json"
CACHE_FILE = "problems.jsonl"


@dataclass
class ScoringSettings:
    verifier: Any
    """The verifier object (from ``rewards.get_verifier``)."""
    key_data: dict[str, Any]
    """Benchmark version, verifier name and options: hashed into the score cache key."""
    timeout: float = 10.0
    pool: Any = None
    chunk_size: int = 256
    graders: Sequence[Any] = ()
    """Graders of a sensitivity report (:func:`benchmarks.graders.build_graders`, ``ours`` first); none: no report."""
    grader_examples: int = 5
    """Disagreeing samples the report keeps as examples."""


def _verdict(result: Any) -> dict[str, Any]:
    info = {k: (v if isinstance(v, (int, float, bool)) or v is None else str(v)[:500])
            for k, v in dict(result.info).items() if k != "traceback"}
    return {"score": result.score, "status": result.status, "info": info}


def evaluate(
    spec: DatasetDefinition,
    problems: Sequence[Problem],
    source: CompletionSource,
    scoring: ScoringSettings,
    out_dir: str | Path,
    *,
    k_values: Sequence[int] = (1,),
    generation_chunk: int = 32,
    overwrite: bool = False,
    header: dict[str, Any] | None = None,
    answer_equivalence: Callable[[list[tuple[str, str]]], set[tuple[str, str]]] | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Generate (or read), score and aggregate; write and return the results dict.

    ``header`` (model, config, dataset record) is copied into the results.
    ``answer_equivalence`` maps pairs of extracted answers to the set of pairs the
    verifier calls equal, so maj@k merges ``0.5`` and ``\\frac12``.
    """
    out_dir = Path(out_dir)
    cache_path = out_dir / CACHE_FILE
    cache: dict[str, dict[str, Any]] = {}
    if cache_path.exists() and not overwrite:
        try:
            cache = {r["task_id"]: r for r in read_jsonl(cache_path)}
        except (JsonlError, KeyError, TypeError) as exc:
            raise UserError(f"the results cache {cache_path} is damaged ({exc}); delete it or pass "
                            "overwrite=true to redo this evaluation") from exc
    score_base = settings_key(scoring.key_data)
    # Per-problem keys: a changed prompt or reference redoes that problem only.
    gen_keys = {p.task_id: settings_key([source.key, p.prompt]) for p in problems}
    score_keys = {p.task_id: settings_key([score_base, p.reference, p.fields]) for p in problems}
    this_run: dict[str, float] = {"generate_s": 0.0, "score_s": 0.0}  # what this call did (0 when cached)

    def save() -> None:
        # Every cached problem is kept, also those outside this run's `limit`.
        write_jsonl(cache_path, list(cache.values()))

    # 1. Completions: reuse those made with the same settings, generate the rest.
    todo = [i for i, p in enumerate(problems)
            if cache.get(p.task_id, {}).get("gen_key") != gen_keys[p.task_id] or isinstance(source, SamplesSource)]
    start = time.perf_counter()
    samples_made = 0
    with tqdm(total=len(todo), desc=f"{spec.name}: generate", unit="problem", disable=not show_progress) as bar:
        for c in range(0, len(todo), generation_chunk):
            chunk = todo[c:c + generation_chunk]
            texts = source.completions([problems[i] for i in chunk], chunk[0])
            episodes = source.episode_records()
            for k, (i, group) in enumerate(zip(chunk, texts)):
                p = problems[i]
                old = cache.get(p.task_id, {})
                record = {"task_id": p.task_id, "gen_key": gen_keys[p.task_id], "completions": list(group),
                          **({"episodes": episodes[k]} if episodes is not None else {})}
                if old.get("completions") == record["completions"] and "verdicts" in old:
                    record.update(score_key=old.get("score_key"), verdicts=old["verdicts"])
                cache[p.task_id] = record
            if not isinstance(source, SamplesSource):
                save()
            samples_made += sum(len(group) for group in texts)
            bar.set_postfix_str(f"{samples_made / max(time.perf_counter() - start, 1e-9):.2f} samples/s")
            bar.update(len(chunk))
    this_run["generate_s"] = time.perf_counter() - start
    this_run["problems_generated"] = 0 if isinstance(source, SamplesSource) else len(todo)
    this_run["samples_generated"] = 0 if isinstance(source, SamplesSource) else samples_made

    # 2. Scores: every sample of a problem whose verdicts are missing or stale.
    items = [(p, j) for p in problems if cache[p.task_id].get("score_key") != score_keys[p.task_id]
             for j in range(len(cache[p.task_id]["completions"]))]
    start = time.perf_counter()
    pending: dict[str, list[Any]] = {}
    with tqdm(total=len(items), desc=f"{spec.name}: score", unit="sample", disable=not show_progress) as bar:
        for c in range(0, len(items), scoring.chunk_size):
            chunk = items[c:c + scoring.chunk_size]
            graded = grade(
                scoring.verifier,
                [cache[p.task_id]["completions"][j] for p, j in chunk],
                [p.reference for p, _ in chunk],
                [p.fields for p, _ in chunk],
                timeout=scoring.timeout,
                pool=scoring.pool,
            )
            for (p, j), result in zip(chunk, graded.batch.results):
                verdicts = pending.setdefault(p.task_id, [None] * len(cache[p.task_id]["completions"]))
                verdicts[j] = _verdict(result)
                if all(v is not None for v in verdicts):
                    cache[p.task_id].update(score_key=score_keys[p.task_id], verdicts=verdicts)
                    del pending[p.task_id]
            save()
            bar.update(len(chunk))
    this_run["score_s"] = time.perf_counter() - start
    this_run["samples_scored"] = len(items)
    save()

    records = [cache[p.task_id] for p in problems]
    equal_pairs: set[tuple[str, str]] = set()
    if "maj@k" in spec.metrics and answer_equivalence is not None:
        equal_pairs = answer_equivalence(distinct_answer_pairs(records, max(k_values, default=1)))
    sensitivity = {}
    if len(scoring.graders) > 1:
        start = time.perf_counter()
        sensitivity = grader_sensitivity(scoring.graders, problems, records, timeout=scoring.timeout,
                                         pool=scoring.pool, max_examples=scoring.grader_examples)
        this_run["graders_s"] = time.perf_counter() - start
    results = {
        **(header or {}),
        "benchmark": {"name": spec.name, "version": spec.version, "description": spec.description},
        "verifier": {"name": spec.verifier.name, "options": scoring.key_data.get("options", spec.verifier.options)},
        "metrics": compute_metrics(spec, problems, records, k_values, equal_pairs),
        **({"maj_votes": vote_counts(records)} if "maj@k" in spec.metrics else {}),
        **({"episodes": episode_metrics(records)} if records and all("episodes" in r for r in records) else {}),
        **({"grader_sensitivity": sensitivity} if sensitivity else {}),
        "this_run": this_run,
        "problems": [
            {"task_id": p.task_id, "reference": p.reference, **({"meta": p.meta} if p.meta else {}),
             "correct": [verdict_correct(v) for v in r["verdicts"]],
             "scores": [v["score"] for v in r["verdicts"]],
             "statuses": [v["status"] for v in r["verdicts"]],
             "answers": [verdict_answer(v) for v in r["verdicts"]]}
            for p, r in zip(problems, records)
        ],
    }
    write_json(out_dir / RESULTS_FILE, results)
    return results
