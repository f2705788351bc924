"""Benchmark metrics from the cached per-problem verdicts of an evaluation.

``compute_metrics`` gives accuracy (avg@n), pass@k, maj@k, status counts and the breakdown;
``episode_metrics`` the turn and tool statistics of multi-turn episodes. Pure functions of the
cache rows of :mod:`benchmarks.evaluate` (``completions`` and ``verdicts`` per problem).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from benchmarks.metrics import maj_at_k, mean_and_stderr, pass_at_k, reports_answers, vote_answer
from reasoning_rl.tasks.data import Problem
from reasoning_rl.tasks.definition import DatasetDefinition
from reasoning_rl.tasks.scoring import extracted_answer, is_correct


def verdict_correct(verdict: dict[str, Any]) -> bool:
    """A cached verdict, judged by the one correctness rule of :mod:`reasoning_rl.tasks.scoring`."""
    return is_correct(verdict["score"], verdict["status"])


def verdict_answer(verdict: dict[str, Any]) -> str | None:
    return extracted_answer(verdict.get("info"))


def _votes(record: dict[str, Any]) -> list[str | None]:
    """What each sample of a problem votes for in maj@k (:func:`benchmarks.metrics.vote_answer`)."""
    return [vote_answer(verdict_answer(v), text, scored=v["status"] == "ok", reports_answers=reports_answers(v.get("info")))
            for v, text in zip(record["verdicts"], record["completions"])]


def vote_counts(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How the samples vote in maj@k: by the verifier's extracted answer, by their completion text
    (scored, but the verifier reported no answer), or not at all (not scored)."""
    counts = Counter("none" if vote is None else "extracted" if verdict_answer(v) is not None else "completion"
                     for r in records for v, vote in zip(r["verdicts"], _votes(r)))
    return {k: counts.get(k, 0) for k in ("extracted", "completion", "none")}


def distinct_answer_pairs(records: Sequence[dict[str, Any]], k: int, cap: int = 12) -> list[tuple[str, str]]:
    """Unordered pairs of distinct extracted answers within each problem's first ``k`` samples.

    Problems with more than ``cap`` distinct answers keep only their ``cap`` most
    frequent ones, bounding the number of verifier calls at ``cap * (cap - 1) / 2``.
    """
    pairs: set[tuple[str, str]] = set()
    for r in records:
        counts = Counter(a for a in (verdict_answer(v) for v in r["verdicts"][:k]) if a is not None)
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
    correct = [[verdict_correct(v) for v in r["verdicts"]] for r in records]
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
        per_problem = [sum(verdict_correct(v) and e["turns"] <= t for v, e in zip(r["verdicts"], r["episodes"]))
                       / len(r["episodes"]) for r in records]
        within[str(t)] = mean_and_stderr(per_problem).as_dict()
    n = max(1, len(episodes))
    return {"episodes": len(episodes), "turns_mean": sum(e["turns"] for e in episodes) / n,
            "tool_calls_mean": calls / n,
            "tool_error_rate": sum(e["tool_errors"] for e in episodes) / calls if calls else 0.0,
            "tool_timeouts": sum(e["tool_timeouts"] for e in episodes),
            "budget_cut_fraction": sum(e["budget_cut"] for e in episodes) / n,
            "accuracy_within_turns": within}
