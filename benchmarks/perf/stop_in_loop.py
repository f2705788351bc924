"""Multi-turn episodes with the native engine finishing each row at its stop string inside the decode loop,
against decoding every row of a turn's batch until the slowest one ends and cutting afterwards
(``NativeEngine(stop_in_loop=True)`` against ``False``; lean runtime, key/value cache carried across turns).

    reasoning-rl-bench stop-in-loop                                 # tiny model, 32 episodes of 4 turns, 3 rounds
    reasoning-rl-bench stop-in-loop --hidden 256 --layers 6         # a bigger model
    python -m benchmarks.perf.stop_in_loop ...                      # the same

The workload is ``reasoning-rl-bench episode-cache``'s (benchmarks/perf/episode_cache.py): a random tiny
model, ``--prompts`` prompts x ``--n`` episodes sampled at temperature 1, a toy environment that ends a turn
at any of ``--stop`` characters and answers with ``--obs-chars`` characters, ``--turns`` turns of at most
``--max-new`` tokens. No tool runs: the time is the engine's. Round r runs both sides with seed r,
alternating which goes first, so machine noise hits both.

Figures: for each side, the tokens decoded (rows x positions the loop sampled, the filler after a finished
row included: ``NativeEngine.decoded_tokens``), the forward steps after each prefill
(``NativeEngine.decode_steps``), and the wall time of the episodes (median over rounds); the ratio of the
times (off / on: > 1, the in-loop stop is faster); whether both sides gave the same episodes in every
round (token ids, log-probs, finish reasons: they must, tests/reasoning_rl/policy/test_stopping.py); and
the load average before and after: timings taken on a loaded machine are not results.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from benchmarks.perf.episode_cache import (
    add_workload_arguments,
    alternated_rounds,
    episode_budget,
    make_environment,
    tiny_lean_model,
    workload_prompts,
)
from benchmarks.perf.results import BenchResult, run_and_record

ENV_NAME = "bench_stop_in_loop"
SIDES = ("in-loop", "afterwards")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="reasoning-rl-bench stop-in-loop", description=__doc__.split("\n\n")[0])
    return add_workload_arguments(p, max_new=48).parse_args(argv)


def one_side(engine: Any, tok: Any, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The episodes of one side, its wall time and the engine's decode counts for them."""
    from reasoning_rl.envs import EpisodeConfig
    from reasoning_rl.envs.episode import EpisodeEngine
    from reasoning_rl.rollouts.sampling import SamplingConfig

    prompts = workload_prompts(args)
    episodes = EpisodeEngine(engine, tok, ENV_NAME, EpisodeConfig(max_turns=args.turns,
                                                                  max_tokens=episode_budget(args)))
    tokens, steps = engine.decoded_tokens, engine.decode_steps
    start = time.perf_counter()
    groups = episodes.generate(prompts, args.n, SamplingConfig(max_new_tokens=args.max_new), seed=seed)
    seconds = time.perf_counter() - start
    flat = [c for g in groups for c in g]
    return {"seconds": seconds, "decoded_tokens": engine.decoded_tokens - tokens,
            "decode_steps": engine.decode_steps - steps,
            "episodes": [(c.token_ids, c.logprobs, c.loss_mask, c.finish_reason) for c in flat],
            "kept_tokens": sum(sum(c.loss_mask or [1] * c.num_tokens) for c in flat),
            "turns_mean": statistics.mean(sum(t.role == "sampled" for t in c.turns) for c in flat)}


def run(argv: list[str]) -> BenchResult:
    from reasoning_rl.envs import register_environment, unregister_environment
    from reasoning_rl.policy.engines import NativeEngine

    args = parse_args(argv)
    model, tok, load_before = tiny_lean_model(args)
    engines = {side: NativeEngine(model, tok, batch_size=args.batch_size, stop_in_loop=side == "in-loop")
               for side in SIDES}
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; {args.prompts} x {args.n} "
          f"episodes, {args.turns} turns of <= {args.max_new} tokens ending at any of {args.stop!r}, "
          f"observations of {args.obs_chars} tokens", flush=True)
    register_environment(ENV_NAME)(make_environment(args.stop, args.obs_chars))
    try:
        sides, same = alternated_rounds(
            lambda side, seed: one_side(engines[side], tok, args, seed), SIDES, args.rounds,
            same=lambda a, b: _same(a["episodes"], b["episodes"]),
            line=lambda x: f"{x['seconds']:.2f} s ({x['decoded_tokens']} tokens decoded)", warm_up=SIDES)
    finally:
        unregister_environment(ENV_NAME)
    load_after = os.getloadavg()
    seconds = {s: statistics.median(x["seconds"] for x in v) for s, v in sides.items()}
    decoded = {s: statistics.mean(x["decoded_tokens"] for x in v) for s, v in sides.items()}
    steps = {s: statistics.mean(x["decode_steps"] for x in v) for s, v in sides.items()}
    kept = statistics.mean(x["kept_tokens"] for x in sides["in-loop"])
    ratio = seconds["afterwards"] / seconds["in-loop"]
    print(f"episodes: {sides['in-loop'][0]['turns_mean']:.2f} turns (mean, round 0); {kept:.0f} sampled tokens "
          f"kept per round (mean)")
    for s in SIDES:
        print(f"{s}: {decoded[s]:.0f} tokens decoded, {steps[s]:.0f} decode steps per round (mean); "
              f"{seconds[s]:.2f} s (median of {args.rounds})")
    print(f"time afterwards / in-loop: {ratio:.2f}x; same episodes on both sides: {'yes' if same else 'NO'}")
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    figures = {"seconds_in_loop": seconds["in-loop"], "seconds_afterwards": seconds["afterwards"], "ratio": ratio,
               "decoded_tokens_in_loop": decoded["in-loop"], "decoded_tokens_afterwards": decoded["afterwards"],
               "decode_steps_in_loop": steps["in-loop"], "decode_steps_afterwards": steps["afterwards"],
               "kept_tokens": kept, "same_episodes": same, "load_before": load_before[0],
               "load_after": load_after[0]}
    return BenchResult(0 if same else 1, vars(args), figures)


def _same(a: list[tuple], b: list[tuple]) -> bool:
    """The same token ids, loss masks and finish reasons, and log-probs equal (NaN on observations)."""
    return len(a) == len(b) and all(
        x[0] == y[0] and x[2] == y[2] and x[3] == y[3] and len(x[1]) == len(y[1])
        and all(p == q or (p != p and q != q) for p, q in zip(x[1], y[1])) for x, y in zip(a, b))


if __name__ == "__main__":
    import sys

    raise SystemExit(run_and_record("stop-in-loop", run, sys.argv[1:]))
