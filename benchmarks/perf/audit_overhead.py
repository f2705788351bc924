"""Step-time overhead of the verifier audit (``task.audit``) on short GRPO runs of the arithmetic task.

    python -m benchmarks.perf.audit_overhead                             # fraction 0.1, math_verify if installed
    python -m benchmarks.perf.audit_overhead --steps 8 --rounds 3 --verifier math --option strict=true

Three settings train the same run (same seed, so the same completions): ``off`` (no audit),
``sync`` (``task.audit.asynchronous=false``: scored before the step goes on) and ``async`` (the
default: scored in the reward pool during the update). Each round runs every setting once, in an
order rotated per round, so machine load falls on all of them alike. The first ``--skip`` steps of
each run (worker start, warm caches) are left out; the figure is the median ``time/step`` over the
rest, and the overhead is ``median(setting) / median(off) - 1``. The target is <= 10% at fraction 0.1.
Each run is a ``reasoning-rl-train`` process (warm start and evaluation off: the timing does not
need a trained policy, and the audit scores the same number of completions whatever they say).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = ("off", "sync", "async")


def run_overrides(setting: str, verifier: str, fraction: float, options: list[str], steps: int,
                  run_dir: Path) -> list[str]:
    """The ``reasoning-rl-train`` overrides of one run."""
    common = [f"trainer.steps={steps}", "trainer.save_every=0", "trainer.tensorboard=false",
              "trainer.log_completions=false", "trainer.progress_bar=false", "evaluation.enabled=false",
              "warmstart.enabled=false", f"hydra.run.dir={run_dir}"]
    if setting == "off":
        return common
    audit = [f"task.audit.verifier={verifier}", f"task.audit.fraction={fraction}",
             f"task.audit.asynchronous={'true' if setting == 'async' else 'false'}"]
    return common + audit + [f"+task.audit.options.{o}" for o in options]


def step_times(run_dir: Path, skip: int) -> tuple[list[float], list[float], list[float]]:
    """``time/step``, ``audit/seconds`` and ``audit/wait_seconds`` of the run's steps after ``skip``."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "time/step" in r][skip:]
    return ([r["time/step"] for r in rows], [r.get("audit/seconds", 0.0) for r in rows],
            [r.get("audit/wait_seconds", 0.0) for r in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_verifier = "math_verify" if importlib.util.find_spec("math_verify") else "math"
    parser.add_argument("--verifier", default=default_verifier, help=f"second verifier (default {default_verifier})")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="second verifier option (repeatable), e.g. strict=true")
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps per run")
    parser.add_argument("--skip", type=int, default=1, help="first steps of each run left out")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated subset of off,sync,async")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    args = parser.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    if "off" not in settings or any(s not in SETTINGS for s in settings):
        parser.error(f"--settings must include 'off' and name only {SETTINGS}, got {args.settings!r}")
    if args.steps <= args.skip:
        parser.error(f"--steps ({args.steps}) must exceed --skip ({args.skip})")

    times: dict[str, list[float]] = {s: [] for s in settings}
    audit_s: dict[str, list[float]] = {s: [] for s in settings}
    wait_s: dict[str, list[float]] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory(prefix="audit_overhead_") as tmp:
        for r in range(args.rounds):
            order = settings[r % len(settings):] + settings[:r % len(settings)]
            for setting in order:
                run_dir = Path(tmp) / f"{setting}-{r}"
                cmd = [sys.executable, "-c", "from reasoning_rl.cli import train_main; train_main()",
                       *run_overrides(setting, args.verifier, args.fraction, args.option, args.steps, run_dir)]
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                if done.returncode != 0:
                    print(f"run {setting} round {r} failed (exit {done.returncode}):\n{done.stderr[-3000:]}",
                          file=sys.stderr)
                    return 1
                t, a, w = step_times(run_dir, args.skip)
                times[setting] += t
                audit_s[setting] += a
                wait_s[setting] += w
                print(f"round {r} {setting:>5}: median time/step {statistics.median(t):.3f} s over {len(t)} steps",
                      flush=True)
    base = statistics.median(times["off"])
    print(f"\naudit overhead, arithmetic GRPO, verifier={args.verifier} fraction={args.fraction}, "
          f"{args.rounds} rounds x {args.steps - args.skip} steps per setting")
    print(f"{'setting':>8} {'median time/step s':>19} {'overhead':>9} {'audit/seconds':>14} {'audit/wait_seconds':>19}")
    for s in settings:
        med = statistics.median(times[s])
        print(f"{s:>8} {med:>19.3f} {100 * (med / base - 1):>8.1f}% {statistics.mean(audit_s[s]):>14.3f} "
              f"{statistics.mean(wait_s[s]):>19.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
