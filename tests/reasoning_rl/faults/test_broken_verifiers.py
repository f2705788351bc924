"""A user's verifier plugin that raises or hangs stops the run in one line naming it, with exit code 2 and
status.json failed (reasoning_rl.reward_guard); it used to finish, exit 0, with "greedy 0.0% -> 0.0%"
(the hanging one after 13 minutes). The plugin is installed as pip would (an entry point), found
through PYTHONPATH, and runs in the reward workers."""

import json

import pytest

from tests.reasoning_rl.conftest import install_verifier_plugin
from tests.reasoning_rl.faults.conftest import refusal, train


@pytest.mark.parametrize(("verifier", "first"), [
    ("exact_int", "(error=8 of 8; first: ValueError: exact_int cannot parse "),
    ("hangs", "(timeout=8 of 8; first: no result within 2s; the item was killed)"),
])
def test_a_plugin_verifier_that_fails_every_call_stops_the_run_in_one_line(tmp_path, verifier, first):
    run = tmp_path / "run"
    out = train(tmp_path, f"trainer.output_dir={run}", f"task.rewards=[{{name: math}}, {{name: {verifier}}}]",
                "rollout.reward_timeout=2", "rollout.reward_workers=4", "algo.group_size=4",
                extra_env=install_verifier_plugin(tmp_path / "plugins"))
    line = refusal(out)
    assert line.startswith(f"verifier {verifier} failed on every item of a training step {first}"), line
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and status["error"].startswith(f"BrokenRewardError: verifier {verifier}")
