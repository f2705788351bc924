"""Reference samples: every benchmark's own solutions written as a samples file.

Fed back through samples mode they validate the whole scoring path: the reference
samples must score 100% and the corrupted ones 0%. Usable as a module::

    python -m benchmarks.samples math500 /tmp/refs --data-dir ../shared/data

or from the eval app: ``reasoning-rl-eval benchmark=math500 write_reference_samples=/tmp/refs``.
Each benchmark gives ``<name>.reference.jsonl`` and ``<name>.corrupted.jsonl``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.catalog import available, get_benchmark, list_benchmarks
from benchmarks.io import write_jsonl
from reasoning_rl.tasks.data import Problem, load_problems, render
from reasoning_rl.tasks.definition import DatasetDefinition
from rewards.math.verifier import list_reference

CODE_CORRUPTION = "\nraise AssertionError('corrupted reference sample: this program must fail')\n"


def answer_text(reference: Any) -> str:
    """A reference as a completion states it: a list of answers (OlympiadBench) as ``a, b``."""
    return list_reference(reference) if isinstance(reference, (list, tuple)) else str(reference)


def corrupt_answer(answer: Any) -> str:
    """A wrong answer: a small integer or decimal plus one, anything else ``(answer)^2+1``.

    ``x^2 + 1 = x`` has no real solution, so the squared form is wrong for every real
    value, and unlike ``x + 1`` it stays wrong for huge values such as ``2^{2005}``
    that a grader with a relative float tolerance calls equal to ``2^{2005} + 1``.
    """
    text = answer_text(answer).strip()
    if re.fullmatch(r"-?\d{1,6}", text):
        return str(int(text) + 1)
    if re.fullmatch(r"-?\d{0,6}\.\d+", text):
        return repr(float(text) + 1)
    return f"({text})^2+1"


def reference_completion(spec: DatasetDefinition, problem: Problem) -> str:
    """The benchmark's own solution rendered as a completion (``reference_completion`` template)."""
    return render(spec.reference_completion, {**problem.row, "reference": answer_text(problem.reference)},
                  f"{spec.name} problem {problem.task_id!r}")


def corrupted_completion(spec: DatasetDefinition, problem: Problem) -> str:
    """A completion that must score 0: the answer changed, or the program made to fail."""
    if spec.corruption == "code":
        return reference_completion(spec, problem) + CODE_CORRUPTION
    return f"The final answer is $\\boxed{{{corrupt_answer(problem.reference)}}}$."


def write_reference_samples(spec: DatasetDefinition, problems: Sequence[Problem], out_dir: str | Path) -> list[Path]:
    """Write ``<name>.reference.jsonl`` and ``<name>.corrupted.jsonl`` in ``out_dir``; return their paths."""
    out_dir = Path(out_dir)
    paths = [out_dir / f"{spec.name}.reference.jsonl", out_dir / f"{spec.name}.corrupted.jsonl"]
    write_jsonl(paths[0], ({"task_id": p.task_id, "completion": reference_completion(spec, p)} for p in problems))
    write_jsonl(paths[1], ({"task_id": p.task_id, "completion": corrupted_completion(spec, p)} for p in problems))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.samples", description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmarks", nargs="+", help=f"benchmark names or 'all' ({', '.join(list_benchmarks())})")
    parser.add_argument("out_dir")
    parser.add_argument("--data-dir", default=None, help="folder holding the local data files (default: hub)")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    specs = [get_benchmark(name) for name in (list_benchmarks() if args.benchmarks == ["all"] else args.benchmarks)]
    if args.benchmarks == ["all"]:  # as benchmark=all: what the data folder (or the hub) can provide
        specs, skipped = available(specs, args.data_dir)
        for name, reason in skipped.items():
            print(f"all: skipping {name}: {reason}", file=sys.stderr)
    for spec in specs:
        problems, _ = load_problems(spec, data_dir=args.data_dir, limit=args.limit)
        for path in write_reference_samples(spec, problems, args.out_dir):
            print(f"wrote {path} ({len(problems)} problems)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
