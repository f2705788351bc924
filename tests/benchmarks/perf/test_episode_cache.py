"""`reasoning-rl-bench episode-cache` runs both sides on one workload and reports what each prefilled."""

from benchmarks.bench import SUBCOMMANDS
from benchmarks.perf.episode_cache import run


def test_a_short_run_reports_both_sides_with_the_same_tokens():
    assert SUBCOMMANDS["episode-cache"] == "benchmarks.perf.episode_cache"
    result = run(["--prompts", "2", "--n", "2", "--turns", "3", "--obs-chars", "12", "--max-new", "8",
                  "--stop", "abcdefghijklmnopqrstuvwxyz", "--rounds", "1"])
    f = result.figures
    assert result.code == 0 and f["same_token_ids"] is True
    assert f["episodes_per_s_cached"] > 0 and f["episodes_per_s_recomputed"] > 0
    # The recompute side prefills every turn's whole context; the cached side the prompt once, then
    # per later turn the last sampled token and a 12-token observation: fewer tokens.
    assert 0 < f["prefilled_per_episode_cached"] < f["prefilled_per_episode_recomputed"]
