"""The before/after table of a recipe over seeds: each seed's accuracy, its change from the base model, and
the mean change with Student's t interval, the figure docs/real_model.md's target is stated in.

    python scripts/seed_table.py <base results.json> <seed results.json> [<seed results.json> ...] [--level 0.95]

Each argument is a ``results.json`` of ``reasoning-rl-eval`` on the same benchmark and problems (the base model,
then one checkpoint per seed). The change of seed j is d_j = acc_j - acc_base (percentage points). Over the
n seeds:

    mean  = 1/n sum_j d_j
    s     = sqrt( 1/(n-1) sum_j (d_j - mean)^2 )
    t interval = mean -+ t_{1-(1-level)/2, n-1} * s / sqrt(n)     (Student's t with n-1 degrees of freedom)

It says how far the seeds' mean could be from the recipe's expected change, given how the seeds spread; each
seed's own accuracy interval (``reasoning-rl-eval`` prints it) says how much the problems' sampling moves one
figure. The base model is one number (greedy decoding is deterministic), so it adds no spread. Reads the result
files only.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): mean -+ t_{1-(1-level)/2, n-1} * s / sqrt(n), Student's t interval of a mean."""
    from scipy.stats import t

    n = len(values)
    if n < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {n}")
    mean = statistics.fmean(values)
    half = t.ppf(1 - (1 - level) / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def accuracy(result_file: Path) -> tuple[str, float, int]:
    """(benchmark, accuracy in percent, problems) of one ``reasoning-rl-eval`` results.json."""
    result = json.loads(result_file.read_text())
    metric = result["metrics"]["accuracy"]
    return result["benchmark"]["name"], 100 * metric["value"], metric["num_problems"]


def table(base: Path, seeds: list[Path], level: float = 0.95) -> str:
    name, before, problems = accuracy(base)
    rows = [accuracy(s) for s in seeds]
    if any((r[0], r[2]) != (name, problems) for r in rows):
        raise ValueError(f"every result must be {name} on {problems} problems, got "
                         f"{[(r[0], r[2]) for r in rows]}")
    changes = [r[1] - before for r in rows]
    lines = ["| model | accuracy | change |", "| --- | ---: | ---: |", f"| base | {before:.2f}% | |"]
    lines += [f"| {s.parent.parent.name} | {r[1]:.2f}% | {d:+.2f} |" for s, r, d in zip(seeds, rows, changes)]
    mean, low, high = t_interval(changes, level)
    lines.append(f"| mean of {len(seeds)} seeds | {before + mean:.2f}% | **{mean:+.2f}** "
                 f"[{low:+.2f}, {high:+.2f}] |")
    return "\n".join(lines) + f"\n\n({name}, {problems} problems; change in points, {level:.0%} t interval)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="results.json of the base model")
    parser.add_argument("seeds", type=Path, nargs="+", help="results.json of each seed's checkpoint")
    parser.add_argument("--level", type=float, default=0.95)
    args = parser.parse_args(argv)
    try:
        print(table(args.base, args.seeds, args.level))
    except (OSError, KeyError, ValueError) as e:
        print(f"seed_table: {e}: pass results.json files written by reasoning-rl-eval on one benchmark",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
