"""``python -m reasoning_rl.health RUN_DIR [RUN_DIR ...] [--threshold RULE=VALUE ...]``: replay each
run's metrics.jsonl through the health rules and print every event, then one line per run with the
rules that fired (so a threshold can be checked on runs that already exist). Exit code 0; 2 on bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reasoning_rl.errors import USER_ERROR_EXIT, UserError
from reasoning_rl.health.monitor import HealthMonitor, replay
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.settings.trainer import HealthConfig


def replay_run(run_dir: Path, cfg: HealthConfig) -> list[str]:
    """The event lines of one run, then its summary line."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{path} does not exist: pass a run folder (one holding metrics.jsonl)")
    rows = read_metrics(path)
    events = replay(rows, HealthMonitor.from_config(cfg))
    fired = sorted({e.rule for e in events if e.event == "fired"})
    return [e.line() for e in events] + [f"{run_dir}: {len(rows)} steps, "
                                         + (f"fired: {', '.join(fired)}" if fired else "no rule fired")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reasoning_rl.health", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--threshold", action="append", default=[], metavar="RULE=VALUE")
    args = parser.parse_args(argv)
    try:
        thresholds = {}
        for item in args.threshold:
            name, _, value = item.partition("=")
            try:
                thresholds[name] = float(value)
            except ValueError:
                raise UserError(f"--threshold {item!r}: write RULE=NUMBER, e.g. truncation=0.3") from None
        cfg = HealthConfig(thresholds=thresholds)
        if problems := cfg.problems("--threshold"):
            raise UserError(problems[0])
        for run_dir in args.run_dirs:
            print("\n".join(replay_run(run_dir, cfg)))
    except UserError as exc:
        print(f"python -m reasoning_rl.health: {exc}", file=sys.stderr)
        return USER_ERROR_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
