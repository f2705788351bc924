"""Grader sensitivity: the same completions scored by several graders, and where they disagree.

``reasoning-rl-eval ... graders=[ours,strict,math_verify]`` reports, per benchmark, the accuracy
under each grader and the problems where the graders' verdicts differ, with examples. It is the
evaluation side of the training audit (:mod:`rewards.audit`): there a second verifier re-scores a
sample of each step's completions, here every grader scores every completion.

Grader names:

* ``ours`` -- the benchmark's own verifier with its options (and ``verifier_options``): the one
  that defines ``accuracy``; its verdicts are the evaluation's own, not scored again;
* ``strict`` -- the benchmark's verifier with ``strict: true`` (for ``math``: only explicit answer
  markers count, no last-formula / last-number fallback);
* any registered verifier name with its default options (``math``, ``math_verify``, ...;
  ``math-verify`` is read as ``math_verify``).

A sample is correct under a grader by :func:`reasoning_rl.tasks.scoring.is_correct` (full score,
status ``ok``); a grader that cannot score a sample counts it as not correct, as ``accuracy`` does.
The extra graders' verdicts are not cached: they are scored again on every run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.metrics import format_metric, mean_and_stderr
from reasoning_rl.errors import UserError
from reasoning_rl.tasks.data import Problem
from reasoning_rl.tasks.definition import DatasetDefinition
from reasoning_rl.tasks.scoring import extracted_answer, grade, is_correct

OURS = "ours"
STRICT = "strict"


class GraderError(UserError, ValueError):
    """A ``graders=`` entry that cannot be built: an unknown name, options the verifier does not take,
    or a grader whose package is not installed (``math_verify``)."""


@dataclass(frozen=True)
class Grader:
    """One named grader: the verifier it scores with and how it was built."""

    name: str
    """As given in ``graders=`` (``ours``, ``strict``, ``math_verify``)."""
    verifier_name: str
    options: Mapping[str, Any]
    verifier: Any


def build_graders(names: Sequence[str], spec: DatasetDefinition, overrides: Mapping[str, Any]) -> list[Grader]:
    """The graders of ``names`` for benchmark ``spec``; ``ours`` always comes first (the others are
    compared with it). Raises :class:`GraderError` naming the entry and what to do."""
    from rewards import VerifierNotFoundError, get_verifier

    own = {**spec.verifier.options, **overrides}
    wanted = [OURS] + [n.strip().replace("-", "_") for n in names if n.strip() and n.strip() != OURS]
    graders = []
    for name in dict.fromkeys(wanted):  # drop repeats, keep order
        verifier_name, options = ((spec.verifier.name, own) if name == OURS else
                                  (spec.verifier.name, {**own, "strict": True}) if name == STRICT else (name, {}))
        try:
            verifier = get_verifier(verifier_name, **options)
        except VerifierNotFoundError as exc:
            raise GraderError(f"graders: {name!r} is neither 'ours', 'strict' nor a verifier; {exc}") from exc
        except (TypeError, ValueError) as exc:  # bad options, or a missing package (math_verify says which)
            raise GraderError(f"graders: {name!r} cannot be built for benchmark {spec.name} "
                              f"(verifier {verifier_name!r}): {exc}") from exc
        graders.append(Grader(name, verifier_name, dict(options), verifier))
    return graders


def _verdict(score: float | None, status: str, info: Mapping[str, Any] | None) -> dict[str, Any]:
    """Correct or not (the benchmark's rule), the status and the extracted answer of one scored sample."""
    return {"correct": is_correct(score, status), "status": status, "answer": extracted_answer(info)}


def _accuracy(verdicts: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    return mean_and_stderr([sum(v["correct"] for v in vs) / len(vs) for vs in verdicts]).as_dict()


def grader_sensitivity(graders: Sequence[Grader], problems: Sequence[Problem], records: Sequence[dict[str, Any]],
                       *, timeout: float, pool: Any = None, max_examples: int = 5) -> dict[str, Any]:
    """Score every completion of ``records`` (the evaluation's cache rows, verdicts of ``ours``
    included) with every grader after the first, and compare.

    Returns ``accuracy`` per grader (mean over problems of ``c_i / n_i``, as the benchmark's
    accuracy), ``disagree_problems`` / ``disagree_samples`` (where the graders' correct-or-not
    verdicts are not all equal), ``vs_ours`` per other grader (``ours_pass_theirs_fail``,
    ``ours_fail_theirs_pass``, ``disagree_rate`` over samples: the audit's names), ``unscored``
    per grader (samples not scored ``ok``) and up to ``max_examples`` disagreeing samples.
    """
    ours = [[_verdict(v["score"], v["status"], v.get("info")) for v in r["verdicts"]] for r in records]
    by_grader = {graders[0].name: ours}
    items = [(i, j) for i, r in enumerate(records) for j in range(len(r["completions"]))]
    for g in graders[1:]:
        graded = grade(g.verifier, [records[i]["completions"][j] for i, j in items],
                       [problems[i].reference for i, _ in items], [problems[i].fields for i, _ in items],
                       timeout=timeout, pool=pool)
        verdicts: list[list[dict[str, Any]]] = [[] for _ in records]
        for (i, _), result in zip(items, graded.batch.results):
            verdicts[i].append(_verdict(result.score, result.status, result.info))
        by_grader[g.name] = verdicts
    names = list(by_grader)
    disagree_samples, problems_with, examples = 0, set(), []
    for i, j in items:
        flags = [by_grader[n][i][j]["correct"] for n in names]
        if len(set(flags)) > 1:
            disagree_samples += 1
            problems_with.add(i)
            if len(examples) < max_examples:
                examples.append({"task_id": problems[i].task_id, "sample": j, "reference": problems[i].reference,
                                 "verdicts": {n: by_grader[n][i][j] for n in names}})
    vs_ours = {}
    for n in names[1:]:
        pairs = [(by_grader[names[0]][i][j]["correct"], by_grader[n][i][j]["correct"]) for i, j in items]
        a_only = sum(a and not b for a, b in pairs)
        b_only = sum(b and not a for a, b in pairs)
        vs_ours[n] = {"ours_pass_theirs_fail": a_only, "ours_fail_theirs_pass": b_only,
                      "disagree_rate": (a_only + b_only) / len(pairs) if pairs else float("nan")}
    return {
        "graders": {g.name: {"verifier": g.verifier_name, "options": dict(g.options)} for g in graders},
        "accuracy": {n: _accuracy(by_grader[n]) for n in names},
        "unscored": {n: sum(v["status"] != "ok" for vs in by_grader[n] for v in vs) for n in names},
        "disagree_problems": len(problems_with),
        "disagree_samples": disagree_samples,
        "vs_ours": vs_ours,
        "examples": examples,
    }


def grader_lines(benchmark: str, report: Mapping[str, Any]) -> list[str]:
    """The printed table: accuracy per grader, its disagreements with ``ours``, then the examples."""
    lines = [f"graders on {benchmark}: {report['disagree_problems']} problems ({report['disagree_samples']} samples) "
             "where the graders disagree",
             f"  {'grader':<16} {'verifier':<26} {'accuracy %':>16} {'ours pass, it fails':>20} "
             f"{'ours fails, it passes':>22} {'not scored':>11}"]
    for name, info in report["graders"].items():
        options = ", ".join(f"{k}={v}" for k, v in info["options"].items())
        label = f"{info['verifier']}({options})" if options else info["verifier"]
        vs = report["vs_ours"].get(name)
        a, b = (vs["ours_pass_theirs_fail"], vs["ours_fail_theirs_pass"]) if vs else ("-", "-")
        lines.append(f"  {name:<16} {label:<26} {format_metric(report['accuracy'][name]):>16} {a!s:>20} {b!s:>22} "
                     f"{report['unscored'][name]:>11}")
    for ex in report["examples"]:
        cells = "; ".join(f"{n}: {'correct' if v['correct'] else 'wrong'} ({v['answer']!r}"
                          f"{'' if v['status'] == 'ok' else ', ' + v['status']})" for n, v in ex["verdicts"].items())
        lines.append(f"  e.g. {ex['task_id']} sample {ex['sample']} (reference {ex['reference']!r}): {cells}")
    return lines
