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

import hashlib
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from benchmarks.graders import grader_sensitivity
from benchmarks.io import JsonlError, iter_jsonl, read_jsonl, write_json, write_jsonl
from benchmarks.metrics import maj_at_k, mean_and_stderr, pass_at_k, reports_answers, vote_answer
from reasoning_rl.envs.base import EpisodeConfig
from reasoning_rl.errors import UserError
from reasoning_rl.tasks.data import Problem
from reasoning_rl.tasks.definition import DatasetDefinition
from reasoning_rl.tasks.scoring import extracted_answer, grade, is_correct

RESULTS_FILE = "results.json"
CACHE_FILE = "problems.jsonl"


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
            bar.update(len(chunk))
    this_run["generate_s"] = time.perf_counter() - start
    this_run["problems_generated"] = 0 if isinstance(source, SamplesSource) else len(todo)

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
        equal_pairs = answer_equivalence(_distinct_answer_pairs(records, max(k_values, default=1)))
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
             "correct": [_is_correct(v) for v in r["verdicts"]],
             "scores": [v["score"] for v in r["verdicts"]],
             "statuses": [v["status"] for v in r["verdicts"]],
             "answers": [_answer(v) for v in r["verdicts"]]}
            for p, r in zip(problems, records)
        ],
    }
    write_json(out_dir / RESULTS_FILE, results)
    return results


def _is_correct(verdict: dict[str, Any]) -> bool:
    """A cached verdict, judged by the one correctness rule of :mod:`reasoning_rl.tasks.scoring`."""
    return is_correct(verdict["score"], verdict["status"])


def _answer(verdict: dict[str, Any]) -> str | None:
    return extracted_answer(verdict.get("info"))


def _votes(record: dict[str, Any]) -> list[str | None]:
    """What each sample of a problem votes for in maj@k (:func:`benchmarks.metrics.vote_answer`)."""
    return [vote_answer(_answer(v), text, scored=v["status"] == "ok", reports_answers=reports_answers(v.get("info")))
            for v, text in zip(record["verdicts"], record["completions"])]


def vote_counts(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How the samples vote in maj@k: by the verifier's extracted answer, by their completion text
    (scored, but the verifier reported no answer), or not at all (not scored)."""
    counts = Counter("none" if vote is None else "extracted" if _answer(v) is not None else "completion"
                     for r in records for v, vote in zip(r["verdicts"], _votes(r)))
    return {k: counts.get(k, 0) for k in ("extracted", "completion", "none")}


def _distinct_answer_pairs(records: Sequence[dict[str, Any]], k: int, cap: int = 12) -> list[tuple[str, str]]:
    """Unordered pairs of distinct extracted answers within each problem's first ``k`` samples.

    Problems with more than ``cap`` distinct answers keep only their ``cap`` most
    frequent ones, bounding the number of verifier calls at ``cap * (cap - 1) / 2``.
    """
    pairs: set[tuple[str, str]] = set()
    for r in records:
        counts = Counter(a for a in (_answer(v) for v in r["verdicts"][:k]) if a is not None)
        distinct = [a for a, _ in counts.most_common(cap)]
        pairs.update((a, b) for i, a in enumerate(distinct) for b in distinct[i + 1:])
    return sorted(pairs)


def compute_metrics(spec: DatasetDefinition, problems: Sequence[Problem], records: Sequence[dict[str, Any]],
                    k_values: Sequence[int], equal_pairs: set[tuple[str, str]] = frozenset()) -> dict[str, Any]:
    """Benchmark metrics from per-problem verdicts.

    * ``accuracy``: mean over problems of ``c_i / n_i`` (pass@1 estimated from all samples).
    * ``pass@k``: mean of the unbiased per-problem estimate ``1 - C(n-c, k) / C(n, k)``,
      for every ``k <= min_i n_i``.
    * ``maj@k``: mean of the per-problem majority-vote verdict over the first ``k`` samples; a sample
      votes for its extracted answer, or its normalised completion when the verifier scored it without
      reporting one (:func:`benchmarks.metrics.vote_answer`).
    * ``counts``: verifier statuses over all samples; non-``ok`` samples count as
      incorrect in the metrics above and are reported here, never hidden.
    * ``breakdown``: accuracy per value of each ``spec.breakdown`` field.
    """
    correct = [[_is_correct(v) for v in r["verdicts"]] for r in records]
    n_min = min((len(c) for c in correct), default=0)
    per_problem_acc = [sum(c) / len(c) for c in correct]
    metrics: dict[str, Any] = {"accuracy": mean_and_stderr(per_problem_acc).as_dict()}
    ks = sorted({k for k in k_values if 1 <= k <= n_min})
    if "pass@k" in spec.metrics:
        for k in ks:
            metrics[f"pass@{k}"] = mean_and_stderr([pass_at_k(len(c), sum(c), k) for c in correct]).as_dict()
    if "maj@k" in spec.metrics:

        def equivalent(a: str, b: str) -> bool:
            return (a, b) in equal_pairs or (b, a) in equal_pairs

        for k in ks:
            values = [maj_at_k(_votes(r), c, k, equivalent) for r, c in zip(records, correct)]
            metrics[f"maj@{k}"] = mean_and_stderr(values).as_dict()
    statuses = Counter(v["status"] for r in records for v in r["verdicts"])
    metrics["counts"] = {"problems": len(records), "samples": sum(len(c) for c in correct),
                         "correct": sum(sum(c) for c in correct),
                         **{s: statuses.get(s, 0) for s in ("ok", "unscorable", "timeout", "error")}}
    if spec.breakdown:
        metrics["breakdown"] = {}
        for col in spec.breakdown:
            groups: dict[str, list[float]] = {}
            for p, acc in zip(problems, per_problem_acc):
                groups.setdefault(str(p.meta[col]), []).append(acc)
            metrics["breakdown"][col] = {g: mean_and_stderr(v).as_dict() for g, v in sorted(groups.items())}
    return metrics


def episode_metrics(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Over every episode of the evaluation (``env=``): means of turns, tool calls and the tool error rate
    (failed calls / calls, as ``env/tool_error_rate``), timeouts and budget cuts counted, and
    ``accuracy_within_turns[t]``: accuracy counting a sample correct only when it used at most ``t`` turns
    (for ``code_feedback`` an episode stops at its first passing attempt, so ``t = 1`` is the first-attempt
    pass rate and ``t = 2`` the pass rate after the second attempt)."""
    episodes = [e for r in records for e in r["episodes"]]
    calls = sum(e["tool_calls"] for e in episodes)
    most = max((e["turns"] for e in episodes), default=0)
    within = {}
    for t in range(1, most + 1):
        per_problem = [sum(_is_correct(v) and e["turns"] <= t for v, e in zip(r["verdicts"], r["episodes"]))
                       / len(r["episodes"]) for r in records]
        within[str(t)] = mean_and_stderr(per_problem).as_dict()
    n = max(1, len(episodes))
    return {"episodes": len(episodes), "turns_mean": sum(e["turns"] for e in episodes) / n,
            "tool_calls_mean": calls / n,
            "tool_error_rate": sum(e["tool_errors"] for e in episodes) / calls if calls else 0.0,
            "tool_timeouts": sum(e["tool_timeouts"] for e in episodes),
            "budget_cut_fraction": sum(e["budget_cut"] for e in episodes) / n,
            "accuracy_within_turns": within}


def episode_line(r: dict[str, Any]) -> str | None:
    """One printed line of a result's episode metrics (None without ``env=``)."""
    e = r.get("episodes")
    if e is None:
        return None
    within = ", ".join(f"<= {t} turns {format_metric(m)}%" for t, m in e["accuracy_within_turns"].items())
    return (f"  episodes: {e['turns_mean']:.2f} turns, {e['tool_calls_mean']:.2f} tool calls, tool errors "
            f"{100 * e['tool_error_rate']:.1f}%, {e['tool_timeouts']} timeouts, budget cut "
            f"{100 * e['budget_cut_fraction']:.1f}% | accuracy {within}")


def format_metric(m: dict[str, Any]) -> str:
    """``"45.20 ± 2.23"`` (percent, standard error) for a metric dict."""
    if m["num_problems"] == 0 or math.isnan(m["value"]):
        return "n/a"
    err = "" if math.isnan(m["stderr"]) else f" ± {100 * m['stderr']:.2f}"
    return f"{100 * m['value']:.2f}{err}"
