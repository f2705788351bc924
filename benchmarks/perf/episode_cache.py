"""Multi-turn episodes per second with the key/value cache carried across turns, against recomputing
each turn's context (``task.episode.cache=true`` against ``false``, native engine, lean runtime).

    reasoning-rl-bench episode-cache                                  # tiny model, 32 episodes of 4 turns, 3 rounds
    reasoning-rl-bench episode-cache --hidden 256 --layers 6 --obs-chars 128   # a bigger model, longer observations
    python -m benchmarks.perf.episode_cache ...                       # the same

The workload, in one process: a random tiny model (``model.tiny``'s shape, or ``--hidden``/``--layers``),
``--prompts`` prompts x ``--n`` episodes each, sampled at temperature 1 with the native engine; a toy
environment (registered for the run) ends a turn at any of ``--stop`` characters and answers each turn
with an observation of ``--obs-chars`` characters (one token each), for ``--turns`` turns. No tool runs:
the time is the engine's. A turn cut at ``--max-new`` tokens, or an EOS, ends its episode early, as in
training. Round r runs both sides with seed r, alternating which goes first, so machine noise hits both.

Figures: episodes per second of each side (median over rounds), the ratio cached / recomputed (> 1: the
carried cache is faster), the context tokens each side prefilled per episode, whether both sides
produced the same token ids in every round (they should: tests/reasoning_rl/envs/test_episode_cache.py),
and the load average before and after: timings taken on a loaded machine are not results.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.perf.results import BenchResult, run_and_record

ENV_NAME = "bench_long_observation"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="reasoning-rl-bench episode-cache", description=__doc__.split("\n\n")[0])
    return add_workload_arguments(p, max_new=32).parse_args(argv)


def add_workload_arguments(p: argparse.ArgumentParser, max_new: int) -> argparse.ArgumentParser:
    """The episode workload's options (this benchmark's and stop-in-loop's); ``max_new``: --max-new's default."""
    p.add_argument("--prompts", type=int, default=8, help="distinct prompts (default 8)")
    p.add_argument("--n", type=int, default=4, help="episodes per prompt (default 4)")
    p.add_argument("--turns", type=int, default=4, help="task.episode.max_turns (default 4)")
    p.add_argument("--obs-chars", type=int, default=64, help="characters (tokens) of each observation (default 64)")
    p.add_argument("--max-new", type=int, default=max_new, help=f"rollout.max_new_tokens of a turn (default {max_new})")
    p.add_argument("--stop", default="aeiouAEI", help="characters that end a turn (default aeiouAEI: ~8%% a token)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each runs both sides (default 3)")
    p.add_argument("--batch-size", type=int, default=64, help="rollout.batch_size (default 64)")
    p.add_argument("--hidden", type=int, default=None, help="model.tiny.hidden_size (default: the preset's)")
    p.add_argument("--layers", type=int, default=None, help="model.tiny.num_layers (default: the preset's)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    return p


def make_environment(stop: str, obs_chars: int) -> type:
    from reasoning_rl.envs import Environment, StepResult

    class LongObservation(Environment):
        """Ends a turn at any ``stop`` character; answers with ``obs_chars`` characters that depend on
        the turn (so rows differ); never done (the episode runs to its turn limit)."""

        def __init__(self) -> None:
            self.stop = tuple(stop)
            self.answers = 0

        def step(self, model_text: str) -> StepResult:
            self.answers += 1
            line = f"\nresult {self.answers}: {len(model_text)} chars; " * (obs_chars // 20 + 1)
            return StepResult(observation=line[:obs_chars])

    return LongObservation


def workload_prompts(args: argparse.Namespace) -> list[str]:
    """The ``--prompts`` prompts of the episode benchmarks (this one and stop-in-loop)."""
    return [f"Problem {i}: compute {7 * i + 3} * {i + 11} with the tool. " for i in range(args.prompts)]


def episode_budget(args: argparse.Namespace) -> int:
    """``task.episode.max_tokens`` of the workload: every turn and observation at its longest."""
    return args.turns * (args.max_new + args.obs_chars)


def tiny_lean_model(args: argparse.Namespace) -> tuple[Any, Any, tuple[float, float, float]]:
    """Set torch's threads, print the load average, and build the random tiny model (``--hidden``,
    ``--layers``) on the lean runtime, in eval mode: (model, tokenizer, load average before)."""
    import torch

    from reasoning_rl.policy.loading import build_tiny_model
    from reasoning_rl.policy.runtime import decide_runtime, set_runtime
    from reasoning_rl.settings.model import TinyModelConfig

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} "
          f"({os.cpu_count()} cores, {args.threads} torch thread(s))", flush=True)
    shape = {k: v for k, v in (("hidden_size", args.hidden), ("num_layers", args.layers)) if v is not None}
    if args.hidden is not None:
        shape["intermediate_size"] = 4 * args.hidden
    model, tok = build_tiny_model(TinyModelConfig(**shape, max_position_embeddings=64 + episode_budget(args)))
    set_runtime(model, decide_runtime(model, "lean", training=False))
    return model.eval(), tok, load_before


def alternated_rounds(run_side: Callable[[str, int], dict[str, Any]], sides: tuple[str, str], rounds: int,
                      same: Callable[[dict[str, Any], dict[str, Any]], bool], line: Callable[[dict[str, Any]], str],
                      warm_up: Sequence[str]) -> tuple[dict[str, list[dict[str, Any]]], bool]:
    """The episode benchmarks' rounds (this one and stop-in-loop): ``run_side(side, seed)`` once for each
    ``warm_up`` side with seed 1000 (allocator, first calls; not kept), then round r runs both sides with
    seed r, ``sides[0]`` first in even rounds and last in odd ones, so machine noise hits both; one line
    per round (``line`` of each side's result). Each side's results in round order, and whether ``same``
    held for the two sides' results in every round."""
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    agree = True
    for side in warm_up:
        run_side(side, 1000)
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        out = {side: run_side(side, r) for side in order}
        agree &= same(out[sides[0]], out[sides[1]])
        for side in order:
            results[side].append(out[side])
        print(f"round {r}: " + ", ".join(f"{side} {line(out[side])}" for side in order), flush=True)
    return results, agree


def one_side(engine: Any, tok: Any, args: argparse.Namespace, cache: bool, seed: int) -> dict[str, Any]:
    from reasoning_rl.envs import EpisodeConfig
    from reasoning_rl.envs.episode import EpisodeEngine
    from reasoning_rl.rollouts.sampling import SamplingConfig

    prompts = workload_prompts(args)
    episodes = EpisodeEngine(engine, tok, ENV_NAME, EpisodeConfig(max_turns=args.turns, max_tokens=episode_budget(args),
                                                                  cache=cache))
    caches: list[Any] = []
    open_cache = engine.context_cache
    engine.context_cache = lambda: caches.append(open_cache()) or caches[-1]  # to read its counts
    try:
        start = time.perf_counter()
        groups = episodes.generate(prompts, args.n, SamplingConfig(max_new_tokens=args.max_new), seed=seed)
        seconds = time.perf_counter() - start
    finally:
        del engine.context_cache
    flat = [c for g in groups for c in g]
    turns = [[t for t in c.turns if t.role == "sampled"] for c in flat]
    if cache:
        prefilled = caches[0].prefilled_tokens
    else:  # every turn ran its whole context: the prompt and everything before the turn
        prefilled = sum(len(c.prompt_token_ids) + t.start for c, ts in zip(flat, turns) for t in ts)
    return {"seconds": seconds, "episodes_per_s": len(flat) / seconds, "ids": [c.token_ids for c in flat],
            "prefilled_per_episode": prefilled / len(flat), "turns_mean": statistics.mean(map(len, turns)),
            "tokens_mean": statistics.mean(len(c.token_ids) for c in flat)}


def run(argv: list[str]) -> BenchResult:
    from reasoning_rl.envs import register_environment, unregister_environment
    from reasoning_rl.policy.engines import NativeEngine

    args = parse_args(argv)
    model, tok, load_before = tiny_lean_model(args)
    engine = NativeEngine(model, tok, batch_size=args.batch_size)
    refusal = engine.context_cache_refusal()
    if refusal is not None:
        raise SystemExit(f"the native engine cannot carry a cache here: {refusal}")
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; {args.prompts} x {args.n} "
          f"episodes, {args.turns} turns, observations of {args.obs_chars} tokens, turns of <= {args.max_new}",
          flush=True)
    register_environment(ENV_NAME)(make_environment(args.stop, args.obs_chars))
    try:
        sides, same = alternated_rounds(
            lambda side, seed: one_side(engine, tok, args, side == "cached", seed), ("cached", "recomputed"),
            args.rounds, same=lambda a, b: a["ids"] == b["ids"],
            line=lambda x: f"{x['episodes_per_s']:.2f} episodes/s ({x['seconds']:.2f} s)", warm_up=("cached",))
    finally:
        unregister_environment(ENV_NAME)
    load_after = os.getloadavg()
    eps = {n: statistics.median(x["episodes_per_s"] for x in v) for n, v in sides.items()}
    prefill = {n: statistics.mean(x["prefilled_per_episode"] for x in v) for n, v in sides.items()}
    ratio = eps["cached"] / eps["recomputed"]
    first = sides["cached"][0]
    print(f"episodes: {first['turns_mean']:.2f} turns, {first['tokens_mean']:.1f} tokens after the prompt (mean, "
          f"round 0)")
    print(f"episodes/s (median of {args.rounds}): cached {eps['cached']:.2f}, recomputed {eps['recomputed']:.2f}; "
          f"ratio {ratio:.2f}x")
    print(f"context tokens prefilled per episode: cached {prefill['cached']:.1f}, "
          f"recomputed {prefill['recomputed']:.1f}; same token ids on both sides: {'yes' if same else 'NO'}")
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    figures = {"episodes_per_s_cached": eps["cached"], "episodes_per_s_recomputed": eps["recomputed"],
               "ratio": ratio, "prefilled_per_episode_cached": prefill["cached"],
               "prefilled_per_episode_recomputed": prefill["recomputed"], "same_token_ids": same,
               "load_before": load_before[0], "load_after": load_after[0]}
    return BenchResult(0, vars(args), figures)


if __name__ == "__main__":
    import sys

    raise SystemExit(run_and_record("episode-cache", run, sys.argv[1:]))
