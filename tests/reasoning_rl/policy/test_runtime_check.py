"""The start-up equality check: the runtime's log-probs on a small sampled batch against
transformers' module forward; a runtime that computes something else stops the run."""

import json
import math

import pytest
import torch

from reasoning_rl.errors import UserError
from reasoning_rl.policy.engines import NativeEngine
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.runtime import decide_runtime, set_runtime
from reasoning_rl.policy.runtime_check import RuntimeMismatchError, check_runtime, tolerance_for
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.settings.model import TinyModelConfig
from tests.conftest import decoder_terms, rounding_atol
from tests.reasoning_rl.conftest import assert_runs_train_alike

pytestmark = pytest.mark.numerics

PROMPTS = ["What is 3 + 4? Answer: ", "Compute 13 + 14. Answer: ", "unused"]


def _rounding(model) -> float:
    """What rounding alone can make of max |runtime - module| (tests/conftest.py's rule): log-probs of an
    untrained model are about log V in size, each the end of one decoder chain of under 64 positions."""
    return rounding_atol(torch.tensor(math.log(model.config.vocab_size)), decoder_terms(model.config, 64))


def _model(runtime, dtype=torch.float32):
    model, tok = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64))
    model.to(dtype)
    set_runtime(model, decide_runtime(model, runtime))
    return model, tok


@pytest.mark.parametrize("runtime", ["lean", "hf"])
def test_the_runtime_equals_the_modules_and_the_random_stream_is_kept(runtime):
    model, tok = _model(runtime)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    check = check_runtime(model, tok, NativeEngine(model, tok), PROMPTS, SamplingConfig(max_new_tokens=16),
                          group_size=8, seed=0)
    assert torch.equal(torch.get_rng_state(), state)  # the run draws the same rollouts as without the check
    assert check.max_abs_diff <= _rounding(model) and check.tolerance == 1e-3
    assert 2 * 4 <= check.tokens <= 2 * 4 * 4  # 2 prompts x 4 samples x at most 4 tokens
    assert f"on {check.tokens} tokens (tolerance 0.001)" in check.describe()


def test_a_runtime_that_computes_another_function_stops_the_run():
    """A forward hook added after the decision changes what the modules compute; the lean forward
    skips it: exactly the silent difference the check is for."""
    model, tok = _model("lean")
    model.model.norm.register_forward_hook(lambda module, args, out: out * 1.5)
    with pytest.raises(RuntimeMismatchError, match=r"differ from transformers' modules by .* Run with model\.runtime=hf"):
        check_runtime(model, tok, NativeEngine(model, tok), PROMPTS, SamplingConfig(), group_size=4, seed=0)
    assert issubclass(RuntimeMismatchError, UserError)  # one line, exit 2
    set_runtime(model, decide_runtime(model, "auto"))  # auto sees the hook: hf, which runs it
    assert check_runtime(model, tok, NativeEngine(model, tok), PROMPTS, SamplingConfig(), group_size=4,
                         seed=0).max_abs_diff <= _rounding(model)


def test_bfloat16_is_held_to_its_own_tolerance():
    model, tok = _model("lean", torch.bfloat16)
    check = check_runtime(model, tok, NativeEngine(model, tok), PROMPTS, SamplingConfig(), group_size=4, seed=0)
    assert check.tolerance == tolerance_for(torch.bfloat16) == 1.0  # and the check passed under it
    assert check.max_abs_diff > 0  # bfloat16's rounding shows: 4e-3 on this model (docs/models.md)


def test_the_run_header_summary_and_first_step_show_the_runtime(small_cfg, tmp_path, caplog):
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    with caplog.at_level("INFO", logger="reasoning_rl"):  # the trainer's and reasoning_rl.policy.prepare's lines
        trainer = Trainer(small_cfg, tmp_path)
        try:
            summary = trainer.train()
        finally:
            trainer.close()
    assert "policy runtime: auto -> lean: LlamaForCausalLM on CPU, float32" in caplog.text
    assert "policy runtime check: max |log-prob - transformers' modules| = " in caplog.text
    runtime = json.loads((tmp_path / "summary.json").read_text())["policy_runtime"]
    assert runtime == summary["policy_runtime"]
    assert (runtime["requested"], runtime["runtime"]) == ("auto", "lean")
    assert runtime["cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # which kernels made the figures
    assert runtime["max_abs_diff"] <= _rounding(trainer.model) and runtime["tolerance"] == 1e-3
    for line in read_metrics(tmp_path / "metrics.jsonl"):  # every line has the same keys
        assert line["policy/runtime_max_abs_diff"] == runtime["max_abs_diff"]


def test_model_runtime_hf_trains_with_checkpointing_and_the_shared_prompt_forward(small_cfg, tmp_path):
    """Regression of the crash ('NoneType' ... 'batch_repeat_interleave') on the hf runtime: with
    gradient checkpointing transformers keeps no cache to share, so full rows run; same numbers."""
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    small_cfg.model.runtime = "hf"
    for checkpointing in (True, False):
        small_cfg.model.gradient_checkpointing = checkpointing
        trainer = Trainer(small_cfg, tmp_path / str(checkpointing))
        try:
            assert trainer.runtime.runtime == "hf"
            trainer.train()
        finally:
            trainer.close()
    on, off = (read_metrics(tmp_path / str(c) / "metrics.jsonl") for c in (True, False))
    # Checkpointed, the policy runs full rows while the reference shares the prompt, so pi_theta - pi_ref is
    # rounding (~1e-7) instead of exactly 0: the helper takes the log-probs' scale for such differences.
    assert_runs_train_alike((on, off), small_cfg, trainer.model.config)


def test_the_vllm_sampler_log_probs_are_in_the_check():
    """vLLM's own log-probs of the tokens it drew go into the check beside the runtime's: equal
    weights give ~0, an engine holding other weights shows the difference (not enforced)."""
    from tests.reasoning_rl.policy.test_vllm_rollout import FakeLLM, _engine, _perturb

    model, tok = _model("lean")
    llm = FakeLLM(model, tok)
    engine = _engine(llm, tok, model)
    same = check_runtime(model, tok, engine, PROMPTS, SamplingConfig(temperature=0.7), group_size=4, seed=0)
    assert same.sampler_max_abs_diff is not None and same.sampler_max_abs_diff <= _rounding(model)
    _perturb(llm.model.policy)  # the engine's copy of the weights differs from the trainer's
    stale = check_runtime(model, tok, engine, PROMPTS, SamplingConfig(temperature=0.7), group_size=4, seed=0)
    assert stale.max_abs_diff <= _rounding(model) and stale.sampler_max_abs_diff > 0.1
    assert f"the sampler's own log-probs: {stale.sampler_max_abs_diff:.2e}" in stale.describe()


def test_the_check_leaves_the_run_as_it_is_without_it(small_cfg, tmp_path, monkeypatch):
    """Same seed, with and without the start-up check: the same metrics and held-out numbers, to the bit."""
    from reasoning_rl import trainer as trainer_module
    from reasoning_rl.policy.runtime_check import RuntimeCheck
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from tests.reasoning_rl.conftest import _train

    small_cfg.trainer.steps = 2
    _, with_check = _train(small_cfg, tmp_path / "checked")
    monkeypatch.setattr(trainer_module, "check_runtime", lambda *args, **kwargs: RuntimeCheck(0.0, 1e-3, 0, None))
    _, without = _train(small_cfg, tmp_path / "unchecked")
    assert with_check["eval_before"] == without["eval_before"] and with_check["eval_after"] == without["eval_after"]
    for a, b in zip(*(read_metrics(tmp_path / run / "metrics.jsonl") for run in ("checked", "unchecked"))):
        for key, value in a.items():
            if not key.startswith(("time/", "throughput/", "policy/runtime")):
                assert b[key] == value, (a["step"], key)
