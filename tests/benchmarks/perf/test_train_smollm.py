"""``reasoning-rl-bench train --model smollm2-135m --compare trl``: both sides get the same workload."""

from __future__ import annotations

from pathlib import Path

from benchmarks.perf.train import _trl_command, _workload_flags, parse_args


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_trl_and_ours_get_the_same_group_prompts_length_beta_and_model(tmp_path):
    args = parse_args(["--model", "smollm2-135m", "--compare", "trl", "--group", "8", "--prompts-per-step", "2",
                       "--max-new", "128", "--steps", "3", "--warmup-steps", "1", "--beta", "0.04",
                       "--data-dir", str(tmp_path), "--gradient-checkpointing"])
    trl = _trl_command(args, Path("out.json"))
    ours = _workload_flags(args)
    assert trl[1:3] == ["-m", "benchmarks.perf.trl_smollm"]  # not the shared tiny-model script
    for name, value in (("--group", "8"), ("--prompts-per-step", "2"), ("--max-new", "128"), ("--beta", "0.04"),
                        ("--steps", "3"), ("--warmup-steps", "1"), ("--data-dir", str(tmp_path))):
        assert _flag(trl, name) == _flag(ours, name) == value
    assert _flag(trl, "--lr") == _flag(ours, "--lr") and _flag(trl, "--temperature") == _flag(ours, "--temperature")
    assert _flag(ours, "--model") == "smollm2-135m"
    assert "--gradient-checkpointing" in trl and "--gradient-checkpointing" in ours


def test_the_bench_workload_still_runs_the_shared_trl_script(tmp_path):
    script = tmp_path / "trl_grpo_cpu.py"
    script.write_text("")
    args = parse_args(["--compare", "trl", "--trl-script", str(script)])
    assert _trl_command(args, Path("o.json"))[1] == str(script) and "--model" not in _workload_flags(args)
