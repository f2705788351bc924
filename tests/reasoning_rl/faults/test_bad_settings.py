"""Bad values are refused before anything runs: one line naming the key and the choices, exit code 2,
no run folder written. Each case used to pass validation and stop deep in the run (exit code 1, a
50-68 line traceback). Every text setting's rule: reasoning_rl/config_choices.py (a test in
tests/reasoning_rl/test_config_checks.py walks the schemas for new ones)."""

import pytest

from tests.reasoning_rl.faults.conftest import refusal, train


@pytest.mark.parametrize(("override", "message"), [
    ("model.dtype=float8", "invalid configuration: model.dtype='float8' is unknown (did you mean float32?); choose one "
                           "of float32, fp32, bfloat16, bf16, float16, fp16"),
    ("model.tiny.arch=gpt2", "invalid configuration: model.tiny.arch='gpt2' is unknown; choose one of llama, qwen2"),
    ("task.none_policy=nonsense", "invalid configuration: task.none_policy='nonsense' is unknown; choose one of "
                                  "propagate, skip, zero"),
    ("task.rewards=[{name: exact_int}]", "invalid configuration: task.rewards[0].name='exact_int' is unknown; "
                                         "choose one of "),
])
def test_a_bad_value_is_one_line_before_anything_runs(tmp_path, override, message):
    run = tmp_path / "run"
    assert refusal(train(tmp_path, override, f"trainer.output_dir={run}")).startswith(message)
    assert not run.exists()
