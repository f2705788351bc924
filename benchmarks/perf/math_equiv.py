"""Accuracy and speed of the math answer checker on labelled (gold, pred, expected) cases.

    reasoning-rl-bench math-equiv                          # every ../shared/data/math_equiv/*.jsonl
    reasoning-rl-bench math-equiv --compare math-verify    # Math-Verify side by side, same cases, same run
    reasoning-rl-bench math-equiv --math500                # MATH-500: reference solutions vs answers
    python -m benchmarks.perf.math_equiv --cases my_cases.jsonl --show 20

A case file is JSONL with ``gold``, ``pred`` and ``expected`` (bool) per line; an optional
``source`` names where it came from. Both checkers run in this one process, case by
case, interleaved (so machine load hits both alike), after one warm-up call each; our
SymPy comparisons run in the verifier's own single worker process (that is how its time
limit is enforced). The per-file table gives agreement with ``expected``, false positives
(judged equal, labelled not equal), false negatives, timeouts and cases/second.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.perf.results import RESULTS_HELP, BenchResult, run_and_record

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"


@dataclass
class Tally:
    """Counts of one checker on one case file."""

    cases: int = 0
    agree: int = 0
    false_pos: int = 0
    false_neg: int = 0
    timeouts: int = 0
    errors: int = 0
    seconds: float = 0.0
    slowest: float = 0.0
    misses: list[tuple[int, str]] = field(default_factory=list)

    def add(self, index: int, verdict: bool, expected: bool, status: str, seconds: float) -> None:
        self.cases += 1
        self.seconds += seconds
        self.slowest = max(self.slowest, seconds)
        self.timeouts += status == "timeout"
        self.errors += status == "error"
        if verdict == expected:
            self.agree += 1
            return
        if verdict:
            self.false_pos += 1
            self.misses.append((index, "FP"))
        else:
            self.false_neg += 1
            self.misses.append((index, "FN"))


Checker = Callable[[str, str], tuple[bool, str]]  # (gold, pred) -> (equal, status)


def ours(timeout: float) -> Checker:
    from rewards.math import GraderConfig, clear_cache, verify

    config = GraderConfig(sympy_timeout=timeout)
    clear_cache()

    def check(gold: str, pred: str) -> tuple[bool, str]:
        grade = verify(gold, pred, config)
        return grade.equal, grade.status

    check("1", "x^2 + 1")  # warm-up: starts the SymPy worker and imports the parser there
    clear_cache()
    return check


def math_verify() -> Checker:
    from math_verify import parse, verify

    def check(gold: str, pred: str) -> tuple[bool, str]:
        try:
            return bool(verify(parse(gold), parse(pred))), "ok"
        except Exception as exc:  # report, do not crash the benchmark
            return False, f"error: {exc!r}"

    check("1", "x^2 + 1")  # warm-up: imports and first-use initialisation
    return check


def run_cases(paths: list[Path], checkers: dict[str, Checker], show: int, figures: dict[str, Any]) -> int:
    """Every checker on every case file; ``figures`` receives agreement and cases/second per file."""
    rows_out = []
    for path in paths:
        cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        tallies = {name: Tally() for name in checkers}
        for i, case in enumerate(cases):
            for name, check in checkers.items():
                start = time.perf_counter()
                verdict, status = check(str(case["gold"]), str(case["pred"]))
                tallies[name].add(i, verdict, bool(case["expected"]), status.split(":")[0],
                                  time.perf_counter() - start)
        for name, t in tallies.items():
            rows_out.append((path.name, name, t))
            figures[f"{path.name}/{name}"] = {"cases": t.cases, "agree": t.agree, "false_pos": t.false_pos,
                                              "false_neg": t.false_neg, "timeouts": t.timeouts,
                                              "cases_per_sec": t.cases / t.seconds if t.seconds else None}
            for index, kind in t.misses[:show]:
                c = cases[index]
                print(f"  [{name}] {kind} #{index} {c.get('source', '')}\n"
                      f"      gold={c['gold'][-120:]!r}\n      pred={c['pred'][-120:]!r}")
    _print_table(rows_out)
    return 0


def _print_table(rows: list[tuple[str, str, Tally]]) -> None:
    header = (f"{'file':<28} {'checker':<12} {'agree':>9} {'acc%':>6} {'FP':>4} {'FN':>4} "
              f"{'timeout':>7} {'error':>5} {'cases/s':>8} {'max s':>6}")
    print(header)
    print("-" * len(header))
    for file, name, t in rows:
        rate = t.cases / t.seconds if t.seconds else float("inf")
        print(f"{file:<28} {name:<12} {t.agree:>4}/{t.cases:<4} {100 * t.agree / max(t.cases, 1):>6.1f} "
              f"{t.false_pos:>4} {t.false_neg:>4} {t.timeouts:>7} {t.errors:>5} {rate:>8.1f} {t.slowest:>6.2f}")
    by_file: dict[str, dict[str, Tally]] = {}
    for file, name, t in rows:
        by_file.setdefault(file, {})[name] = t
    for file, tallies in by_file.items():
        if "ours" in tallies and "math-verify" in tallies:
            a, b = tallies["ours"], tallies["math-verify"]
            speedup = (b.seconds / b.cases) / (a.seconds / a.cases) if a.seconds and b.cases else float("nan")
            print(f"{file}: ours {a.agree} vs math-verify {b.agree} agreements; speed ratio {speedup:.2f}x")


def run_math500(path: Path, timeout: float, show: int, figures: dict[str, Any]) -> int:
    from rewards.math import GOLD, MathVerifier, extract_answer

    verifier = MathVerifier(sympy_timeout=timeout)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    passed, failures = 0, []
    start = time.perf_counter()
    for row in rows:
        result = verifier(row["solution"], row["answer"])
        if result.status == "ok" and result.score == 1.0:
            passed += 1
        else:
            failures.append((row.get("unique_id", "?"), row["answer"], extract_answer(row["solution"], GOLD),
                             result.status))
    seconds = time.perf_counter() - start
    figures.update(math500_rows=len(rows), math500_passed=passed, rows_per_sec=len(rows) / seconds)
    print(f"MATH-500 reference solutions vs answers ({path}): {passed}/{len(rows)} judged equivalent, "
          f"{len(rows) / seconds:.1f} rows/s")
    for uid, answer, extracted, status in failures[:show]:
        print(f"  FAIL {uid}: answer={answer!r} extracted={extracted!r} status={status}")
    return 0 if passed == len(rows) else 1


def run(argv: list[str]) -> BenchResult:
    parser = argparse.ArgumentParser(prog="reasoning-rl-bench math", description=__doc__.split("\n\n")[0],
                                     epilog=RESULTS_HELP)
    parser.add_argument("--cases", nargs="+", type=Path, default=None,
                        help="JSONL case files (default: ../shared/data/math_equiv/*.jsonl)")
    parser.add_argument("--compare", choices=["math-verify"], default=None,
                        help="also run Math-Verify (default settings) on the same cases")
    parser.add_argument("--math500", nargs="?", const=DEFAULT_DATA / "math500.jsonl", type=Path, default=None,
                        help="check MATH-500 reference solutions against their answers instead")
    parser.add_argument("--timeout", type=float, default=5.0, help="SymPy time limit per comparison (s)")
    parser.add_argument("--show", type=int, default=10, help="list up to this many misses per file and checker")
    args = parser.parse_args(argv)
    settings = {k: [str(x) for x in v] if isinstance(v, list) else str(v) if isinstance(v, Path) else v
                for k, v in vars(args).items()}
    figures: dict[str, Any] = {}
    if args.math500 is not None:
        return BenchResult(run_math500(args.math500, args.timeout, args.show, figures), settings, figures)
    paths = args.cases or sorted((DEFAULT_DATA / "math_equiv").glob("*.jsonl"))
    if not paths:
        print(f"no case files found under {DEFAULT_DATA / 'math_equiv'}; pass --cases PATH")
        return BenchResult(2, settings, figures)
    checkers: dict[str, Checker] = {"ours": ours(args.timeout)}
    if args.compare == "math-verify":
        checkers["math-verify"] = math_verify()
    return BenchResult(run_cases(paths, checkers, args.show, figures), settings, figures)


def main(argv: list[str] | None = None) -> int:
    return run_and_record("math", run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
