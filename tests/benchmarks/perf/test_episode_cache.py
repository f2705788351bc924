"""`reasoning-rl-bench episode-cache` runs both sides on one workload and reports what each prefilled."""

import json

from benchmarks.bench import SUBCOMMANDS, main
from benchmarks.perf.episode_cache import run
from benchmarks.perf.results import RESULT_PREFIX


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


def test_n_on_the_command_line_is_episodes_per_prompt_not_no_results(tmp_path, monkeypatch, capsys):
    """`--n 2` is the benchmark's own option: not an abbreviation of the shared `--no-results`."""
    monkeypatch.chdir(tmp_path)
    code = main(["episode-cache", "--prompts", "2", "--n", "2", "--turns", "2", "--obs-chars", "4", "--max-new", "4",
                 "--rounds", "1"])
    out = capsys.readouterr().out
    record = json.loads(out.strip().splitlines()[-1].removeprefix(RESULT_PREFIX))
    assert code == 0 and record["args"]["n"] == 2
    written = [json.loads(line) for line in (tmp_path / "bench_results.jsonl").read_text().splitlines()]
    assert [r["args"]["n"] for r in written] == [2]  # the record was appended: --n did not read as --no-results
