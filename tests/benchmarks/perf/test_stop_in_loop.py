"""`reasoning-rl-bench stop-in-loop` runs both sides on one workload and reports what each decoded."""

from benchmarks.bench import SUBCOMMANDS
from benchmarks.perf.stop_in_loop import run


def test_a_short_run_reports_both_sides_with_the_same_episodes():
    assert SUBCOMMANDS["stop-in-loop"] == "benchmarks.perf.stop_in_loop"
    # Turns end at any lowercase letter (most tokens): nearly every row of a turn stops within a few
    # tokens, so the in-loop side decodes fewer tokens than the 16 steps the other side runs each turn.
    result = run(["--prompts", "2", "--n", "2", "--turns", "2", "--obs-chars", "8", "--max-new", "16",
                  "--stop", "abcdefghijklmnopqrstuvwxyz", "--rounds", "1"])
    f = result.figures
    assert result.code == 0 and f["same_episodes"] is True
    assert f["seconds_in_loop"] > 0 and f["seconds_afterwards"] > 0
    assert f["kept_tokens"] <= f["decoded_tokens_in_loop"] < f["decoded_tokens_afterwards"]
    assert f["decode_steps_in_loop"] < f["decode_steps_afterwards"]
