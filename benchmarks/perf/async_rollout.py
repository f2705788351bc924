"""Asynchronous rollouts: wall-clock per step of ``rollout.max_staleness=1`` against the synchronous loop.

    reasoning-rl-bench async                                # 30 GRPO steps, k = 0 and k = 1, 2 rounds, tiny model
    reasoning-rl-bench async --steps 50 --rounds 3          # longer
    reasoning-rl-bench async --hidden 256 --layers 6 --max-new 24 --no-warm-start   # a bigger random model
    python -m benchmarks.perf.async_rollout ...             # the same

Each run is a fresh ``reasoning-rl-train`` process on the arithmetic task (``task=arithmetic
model=tiny rollout=native``, GRPO with the off-policy lab's settings), the same N steps with k = 0 and
k = 1. k = 0 trains, samples, scores and runs the reference forward in one process with
``--sync-threads`` torch threads (default 1, the ``model=tiny`` preset's own setting; ``--sync-threads 2``
gives it both cores, which on a loaded machine is far slower: OpenMP threads wait on each other); k = 1
trains with ``--async-threads`` (default 1) while the generator process samples, scores and computes the
reference log-probs with one thread. Round r runs both with ``trainer.seed=r``, alternating which goes
first, so machine noise hits both; by default both start from one supervised warm start (made once, in ``--workdir``), so held-out
greedy accuracy after training is worth comparing.

Figures: seconds per step of each (the mean of ``time/step`` over the steps after ``--skip``, default 1:
the first asynchronous step waits for the generator process to start), the whole loop's seconds (the sum
of ``time/step`` over every step, the generator's start included), the ratio k=0 / k=1 (> 1: the
asynchronous loop is faster), the seconds per step of each phase (the trainer's sampling, scoring,
reference forward, policy forward/backward, update and weight copy; the generator's wait, sampling,
reference log-probs and scoring: where the time went; on a loaded machine every phase of k = 1 is
inflated by the two processes taking turns on the cores),
held-out greedy accuracy after training (per round; each side's mean over seeds with a 95% bootstrap
interval, the paired difference, and whether k = 1 lies within k = 0's interval), and the machine's load
average (``os.getloadavg``) before and after: timings taken on a loaded machine are not results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.perf.child import child_env
from benchmarks.perf.results import BenchResult, run_and_record


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="reasoning-rl-bench async", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="GRPO steps of every run (default 30)")
    p.add_argument("--rounds", type=int, default=2, help="rounds; round r uses trainer.seed=r (default 2)")
    p.add_argument("--skip", type=int, default=1, help="first steps left out of s/step (default 1)")
    p.add_argument("--sync-threads", type=int, default=1,
                   help="torch threads of the k = 0 run (default 1, model=tiny's own setting; try 2 too)")
    p.add_argument("--async-threads", type=int, default=1, help="trainer threads of the k = 1 run (default 1)")
    p.add_argument("--max-new", type=int, default=None, help="rollout.max_new_tokens (default: the task's)")
    p.add_argument("--hidden", type=int, default=None, help="model.tiny.hidden_size (default: the preset's)")
    p.add_argument("--layers", type=int, default=None, help="model.tiny.num_layers (default: the preset's)")
    p.add_argument("--no-warm-start", action="store_true", help="start both from the random model")
    p.add_argument("--workdir", default="/tmp/reasoning_rl_bench_async", help="run folders and the warm start")
    p.add_argument("--extra", nargs="*", default=[], help="more reasoning-rl-train overrides for every run")
    return p.parse_args(argv)


def base_overrides(args: argparse.Namespace) -> list[str]:
    out = ["task=arithmetic", "model=tiny", "rollout=native", "algo.prompts_per_step=16", "algo.kl.beta=0.01",
           "trainer.save_every=0", "trainer.log_completions=false", "trainer.progress_bar=false",
           "trainer.tensorboard=false", "rollout.reward_workers=1", "evaluation.samples_per_problem=1"]
    if args.hidden is not None:
        out.append(f"model.tiny.hidden_size={args.hidden}")
    if args.layers is not None:
        out.append(f"model.tiny.num_layers={args.layers}")
    if args.max_new is not None:
        out.append(f"rollout.max_new_tokens={args.max_new}")
    return out + list(args.extra)


def train(overrides: list[str], run_dir: Path) -> None:
    """One ``reasoning-rl-train`` run in a fresh process (its output kept in ``run_dir/train.log``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", "import sys; from reasoning_rl.cli import train_main; sys.exit(train_main())",
           *overrides, f"trainer.output_dir={run_dir}", f"hydra.run.dir={run_dir}/hydra"]
    with open(run_dir / "train.log", "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env())
    if proc.returncode != 0:
        tail = (run_dir / "train.log").read_text()[-3000:]
        raise SystemExit(f"run {run_dir} failed (exit {proc.returncode}):\n{tail}")


def warm_start(args: argparse.Namespace, workdir: Path) -> list[str]:
    """The overrides that start a run from the shared warm start (made once), or [] without one."""
    if args.no_warm_start:
        return ["warmstart.enabled=false"]
    warm = workdir / "warm"
    checkpoint = warm / "checkpoint-0"
    if not (checkpoint / "trainer_state.pt").exists():
        print(f"[warm start] once, into {warm}", flush=True)
        train([*base_overrides(args), "trainer.steps=0", "evaluation.enabled=false"], warm)
    return [f"model.name_or_path={checkpoint}", "warmstart.enabled=false"]


PHASES = ("time/generate", "time/reward", "time/frozen_logprobs", "time/policy", "time/update",
          "time/weight_sync", "time/generator_wait", "time/generator_sample", "time/generator_reference",
          "time/generator_reward", "time/generator_busy")
"""The per-step phases averaged over the timed steps: the trainer's, then the generator process's (k = 1)."""


def summarise(run_dir: Path, skip: int) -> dict[str, Any]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    timed = [r for r in rows if r["step"] > skip] or rows
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"s_per_step": statistics.mean(r["time/step"] for r in timed),
            "loop_s": sum(r["time/step"] for r in rows),
            "greedy_after": (summary.get("eval_after") or {}).get("greedy_accuracy"),
            "greedy_before": (summary.get("eval_before") or {}).get("greedy_accuracy"),
            "phases": {k: statistics.mean(r[k] for r in timed) for k in PHASES if all(k in r for r in timed)}}


def accuracy_lines(results: dict[int, list[dict[str, Any]]]) -> list[str]:
    """Held-out greedy accuracy after training: each side's mean over rounds (seeds) with its 95% bootstrap
    interval (reasoning_rl.reporting.stats, as the sweep report), the paired difference k=1 - k=0 on the same
    seeds with its interval, and whether k = 1's mean lies within k = 0's interval (the issue's target)."""
    from reasoning_rl.reporting.stats import bootstrap_mean

    acc = {k: [x["greedy_after"] for x in v] for k, v in results.items()}
    if any(a is None for v in acc.values() for a in v):
        return ["held-out greedy: not evaluated (a run has no eval_after)"]
    k0, k1 = bootstrap_mean(acc[0]), bootstrap_mean(acc[1])
    diff = bootstrap_mean([b - a for a, b in zip(acc[0], acc[1])])
    within = k0.low <= k1.mean <= k0.high
    return [f"held-out greedy after: k=0 {k0.mean:.3f} [{k0.low:.3f}, {k0.high:.3f}], k=1 {k1.mean:.3f} "
            f"[{k1.low:.3f}, {k1.high:.3f}] (mean over {k0.n} seeds, 95% bootstrap interval); paired k=1 - k=0 "
            f"{diff.mean:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]; k=1 within k=0's interval: "
            f"{'yes' if within else 'no'}" + (" (2 seeds make a coarse interval: --rounds 3 or more)"
                                               if k0.n < 3 else "")]


def run(argv: list[str]) -> BenchResult:
    args = parse_args(argv)
    workdir = Path(args.workdir).resolve()  # absolute: in the printed lines and in the runs' overrides
    load_before = os.getloadavg()
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} "
          f"({os.cpu_count()} cores)", flush=True)
    start = warm_start(args, workdir)
    sides = {0: [f"trainer.num_threads={args.sync_threads}", "rollout.max_staleness=0"],
             1: [f"trainer.num_threads={args.async_threads}", "rollout.max_staleness=1"]}
    results: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    for r in range(args.rounds):
        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
            run_dir = workdir / f"round{r}_k{k}"
            shutil.rmtree(run_dir, ignore_errors=True)  # a finished run folder would be skipped, not timed
            t0 = time.perf_counter()
            train([*base_overrides(args), *start, *sides[k], f"trainer.steps={args.steps}", f"trainer.seed={r}"],
                  run_dir)
            res = {**summarise(run_dir, args.skip), "wall_s": time.perf_counter() - t0}
            results[k].append(res)
            print(f"[round {r}] k={k}: {res['s_per_step']:.3f} s/step, greedy after {res['greedy_after']:.3f}, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    load_after = os.getloadavg()
    mean = {k: statistics.mean(x["s_per_step"] for x in v) for k, v in results.items()}
    ratios = [a["s_per_step"] / b["s_per_step"] for a, b in zip(results[0], results[1])]
    print(f"\n{args.steps} steps, {args.rounds} rounds (seeds 0..{args.rounds - 1}), s/step over steps > {args.skip}")
    print("| k | s/step per round | mean s/step | loop s per round | greedy after per round |")
    print("| --- | --- | --- | --- | --- |")
    for k, v in results.items():
        per_round = ", ".join(f"{x['s_per_step']:.3f}" for x in v)
        greedy = ", ".join(f"{x['greedy_after']:.3f}" for x in v)
        loops = ", ".join(f"{x['loop_s']:.1f}" for x in v)
        print(f"| {k} | {per_round} | {mean[k]:.3f} | {loops} | {greedy} |")
    phases = {k: {p: statistics.mean(x["phases"][p] for x in v if p in x["phases"])
                  for p in PHASES if any(p in x["phases"] for x in v)} for k, v in results.items()}
    print("\nseconds per step by phase (mean over rounds; the trainer's, then the generator process's):")
    print("| phase | k = 0 | k = 1 |")
    print("| --- | --- | --- |")
    for p in PHASES:
        if p in phases[0] or p in phases[1]:
            print(f"| {p} | " + " | ".join(f"{phases[k][p]:.3f}" if p in phases[k] else "-" for k in (0, 1)) + " |")
    print(f"speed-up k=1 over k=0: {mean[0] / mean[1]:.2f}x (per round: {', '.join(f'{x:.2f}' for x in ratios)})")
    for line in accuracy_lines(results):
        print(line)
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    figures = {"s_per_step_k0": mean[0], "s_per_step_k1": mean[1], "speedup": mean[0] / mean[1],
               "ratios": ratios, "greedy_after_k0": [x["greedy_after"] for x in results[0]],
               "greedy_after_k1": [x["greedy_after"] for x in results[1]],
               "loop_s_k0": [x["loop_s"] for x in results[0]], "loop_s_k1": [x["loop_s"] for x in results[1]],
               "load_before": list(load_before), "load_after": list(load_after), "phases": phases}
    return BenchResult(0, vars(args), figures)


if __name__ == "__main__":
    raise SystemExit(run_and_record("async", run, sys.argv[1:]))
