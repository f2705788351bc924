"""CPU seconds per step of each process of the training loop, ``rollout.max_staleness`` 0 against 1: where
the work of a step runs, measured in a way a loaded machine hardly distorts (wall-clock times it does).

    python -m benchmarks.perf.async_cpu --warm /tmp/reasoning_rl_bench_async/warm/checkpoint-0
    python -m benchmarks.perf.async_cpu --steps 20 --skip 2 --warm ...      # the defaults

The workload is ``reasoning-rl-bench async``'s (benchmarks/perf/async_rollout.py: the tiny model on the
arithmetic task, GRPO 16 x 8, beta 0.01, one torch thread, one reward worker), from its warm start
(``--warm``; without it, the random model), held-out evaluation off. Each setting trains in this process
(a Trainer); between the start of step ``--skip`` and the end of the last step it reads, from /proc,
the user + system CPU seconds of every process of the run: the trainer (all its threads), its reward
workers, and with k = 1 the generator process and the generator's reward workers (a reward worker's own
workers, which the math verifier starts, count with it).

What it prints, per step: each process's CPU seconds, and what they give on an otherwise idle 2-core
machine if nothing but the work counted (no contention for caches or memory bandwidth, no waiting on
pipes; a projection, not a measurement):

    k = 0:  T0 = trainer + its reward worker          (one after the other: the trainer waits for the scores)
    k = 1:  T1 = max(trainer, generator + its reward worker)       (the two sides overlap on the two cores)

and T0 / T1. The wall-clock speed-up is ``reasoning-rl-bench async`` on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

CPU_ROLES = ("trainer", "trainer reward workers", "generator", "generator reward workers")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.perf.async_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="GRPO steps of each run (default 20)")
    p.add_argument("--skip", type=int, default=2, help="first steps left out (default 2: start-up)")
    p.add_argument("--warm", default=None, help="checkpoint to start from (the benchmark's warm start)")
    p.add_argument("--seed", type=int, default=0, help="trainer.seed (default 0)")
    return p.parse_args(argv)


def overrides(args: argparse.Namespace, k: int, run_dir: Path) -> list[str]:
    from benchmarks.perf.async_rollout import base_overrides
    from benchmarks.perf.async_rollout import parse_args as bench_args

    start = [f"model.name_or_path={args.warm}", "warmstart.enabled=false"] if args.warm else \
        ["warmstart.enabled=false"]
    return [*base_overrides(bench_args([])), *start, "evaluation.enabled=false", "trainer.num_threads=1",
            f"rollout.max_staleness={k}", f"trainer.steps={args.steps}", f"trainer.seed={args.seed}",
            f"trainer.output_dir={run_dir}"]


def processes() -> dict[int, tuple[int, float, str]]:
    """Every process of this machine: pid -> (parent pid, user + system CPU seconds, command line), from
    /proc (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ..., utime, stime
        out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, cmdline)
    return out


def cpu_seconds(trainer: Any) -> dict[str, float]:
    """User + system CPU seconds so far of each role's processes (``CPU_ROLES``)."""
    table = processes()
    me = os.getpid()
    generator = getattr(getattr(trainer.context.engine, "process", None), "pid", None)

    def ancestors(pid: int) -> list[int]:
        chain = []
        while pid in table and pid not in chain:
            chain.append(pid)
            pid = table[pid][0]
        return chain

    out = dict.fromkeys(CPU_ROLES, 0.0)
    for pid, (_, seconds, cmdline) in table.items():
        chain = ancestors(pid)
        if pid == me:
            out["trainer"] += seconds
        elif pid == generator:
            out["generator"] += seconds
        elif me in chain and "rewards._worker" in cmdline:  # a verifier's own workers too (math's)
            out["generator reward workers" if generator in chain else "trainer reward workers"] += seconds
    return out


def measure(args: argparse.Namespace, k: int, workdir: Path) -> dict[str, float]:
    """CPU seconds per step of each role over steps ``skip .. steps - 1`` of one run."""
    from hydra import compose, initialize_config_module

    from reasoning_rl.cli import to_train_config
    from reasoning_rl.config_store import register_configs
    from reasoning_rl.trainer import Trainer

    register_configs()
    run_dir = workdir / f"k{k}"
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = to_train_config(compose(config_name="train", overrides=overrides(args, k, run_dir)))
    trainer = Trainer(cfg, run_dir)
    marks: dict[str, dict[str, float]] = {}
    step = trainer.algorithm.step

    def marked_step(s: int) -> Any:
        if s == args.skip:
            marks["start"] = cpu_seconds(trainer)
        out = step(s)
        if s == args.steps - 1:
            marks["end"] = cpu_seconds(trainer)
        return out

    trainer.algorithm.step = marked_step  # type: ignore[method-assign]
    try:
        trainer.train()
    finally:
        trainer.close()
    n = args.steps - args.skip
    return {role: (marks["end"][role] - marks["start"][role]) / n for role in CPU_ROLES}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not 0 <= args.skip < args.steps - 1:
        raise SystemExit(f"--skip must be at least 0 and below --steps - 1 = {args.steps - 1}, got {args.skip}")
    workdir = Path(tempfile.mkdtemp(prefix="async_cpu_"))
    try:
        per_step = {k: measure(args, k, workdir) for k in (0, 1)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nCPU seconds per step over steps {args.skip}..{args.steps - 1} (user + system, /proc)")
    print("| process | k = 0 | k = 1 |")
    print("| --- | --- | --- |")
    for role in CPU_ROLES:
        print(f"| {role} | {per_step[0][role]:.3f} | {per_step[1][role]:.3f} |")
    c0, c1 = per_step[0], per_step[1]
    t0 = c0["trainer"] + c0["trainer reward workers"]
    t1 = max(c1["trainer"] + c1["trainer reward workers"], c1["generator"] + c1["generator reward workers"])
    print(f"projected idle 2-core step (CPU only): k = 0 {t0:.3f} s, k = 1 {t1:.3f} s, {t0 / t1:.2f}x")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
