"""model.runtime: decided once per model, with the reason in words; lean refused where it would
compute something else than transformers' modules (reasoning_rl.policy.runtime)."""

import pytest
import torch

from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.logprobs import completion_logprobs
from reasoning_rl.policy.runtime import (
    RuntimeSettingError,
    decide_runtime,
    runtime_of,
    set_runtime,
    uses_lean,
)
from reasoning_rl.settings.model import TinyModelConfig


def _model(arch="llama"):
    model, tok = build_tiny_model(TinyModelConfig(arch=arch, hidden_size=32, num_layers=2, num_heads=2,
                                                  intermediate_size=64))
    return model, tok


@pytest.mark.parametrize("arch,name", [("llama", "LlamaForCausalLM"), ("qwen2", "Qwen2ForCausalLM")])
def test_auto_takes_lean_on_the_cpu_and_says_so(arch, name):
    model, _ = _model(arch)
    decision = decide_runtime(model, "auto")
    assert decision.runtime == "lean"
    assert decision.describe() == f"auto -> lean: {name} on CPU, float32"
    assert decide_runtime(model.to(torch.bfloat16), "lean").describe() == (
        f"lean: {name} on CPU, bfloat16, as asked (model.runtime=lean)")


def test_hf_is_taken_as_asked():
    model, _ = _model()
    decision = decide_runtime(model, "hf")
    assert (decision.requested, decision.runtime) == ("hf", "hf")
    assert "model.runtime=hf" in decision.describe()


def test_an_unknown_setting_lists_the_choices():
    model, _ = _model()
    with pytest.raises(RuntimeSettingError, match=r"model\.runtime='fast' is unknown; choose one of auto, hf, lean"):
        decide_runtime(model, "fast")


def test_attention_dropout_in_training_mode_refuses_lean():
    model, _ = _model()
    model.config.attention_dropout = 0.1
    decision = decide_runtime(model, "auto", training=True)
    assert decision.describe() == "auto -> hf: lean refused: attention dropout 0.1 in training mode (the lean " \
                                  "forward has no dropout)"
    with pytest.raises(RuntimeSettingError, match=r"model.runtime=lean refused: attention dropout 0.1 in training "
                                                  r"mode .* use model.runtime=hf"):
        decide_runtime(model, "lean", training=True)
    assert decide_runtime(model, "lean", training=False).runtime == "lean"  # evaluation: no dropout


def test_another_attention_kernel_is_kept_by_auto_and_refused_by_lean():
    model, _ = _model()
    model.config._attn_implementation = "flash_attention_2"
    decision = decide_runtime(model, "auto")
    assert decision.runtime == "hf"
    assert "attn_implementation=flash_attention_2" in decision.reason
    with pytest.raises(RuntimeSettingError, match="attn_implementation=flash_attention_2"):
        decide_runtime(model, "lean")


def test_an_unsupported_family_falls_back_to_hf_with_the_reason():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=32))
    decision = decide_runtime(model, "auto")
    assert decision.describe().startswith("auto -> hf: lean refused: GPT2LMHeadModel is not one of "
                                          "LlamaForCausalLM, Qwen2ForCausalLM")
    with pytest.raises(RuntimeSettingError, match="GPT2LMHeadModel is not one of"):
        decide_runtime(model, "lean")


def test_auto_keeps_hf_off_the_cpu_and_fsdp_refuses_lean():
    model, _ = _model()
    on_meta = decide_runtime(model.to("meta"), "auto")  # any device that is not the CPU
    assert on_meta.runtime == "hf" and "lean is measured faster only on the CPU" in on_meta.reason
    model, _ = _model()
    assert decide_runtime(model, "auto", sharded=True).reason.startswith("lean refused: trainer.fsdp shards")
    with pytest.raises(RuntimeSettingError, match=r"trainer\.fsdp"):
        decide_runtime(model, "lean", sharded=True)


@pytest.mark.parametrize("runtime,module_calls", [("lean", 0), ("hf", 1)])
def test_the_recorded_decision_is_what_runs(runtime, module_calls):
    """The log-probs read the recorded decision instead of re-deciding per call: a forward hook
    added after the decision (which would make auto refuse lean) does not change the path."""
    model, tok = _model()
    set_runtime(model, decide_runtime(model, runtime))
    calls = []
    model.model.norm.register_forward_hook(lambda module, args, out: calls.append(1))
    ids = torch.tensor([tok("1+2=", add_special_tokens=False)["input_ids"] + [5, 6]])
    completion_logprobs(model, ids, torch.ones_like(ids), ids.shape[1] - 2)
    assert len(calls) == module_calls
    assert uses_lean(model) == (runtime == "lean")


def test_an_undecided_model_gets_auto_once():
    model, _ = _model()
    assert runtime_of(model).describe() == "auto -> lean: LlamaForCausalLM on CPU, float32"
    model.model.norm.register_forward_hook(lambda module, args, out: None)
    assert runtime_of(model).runtime == "lean"  # recorded at the first use, not re-decided
    assert decide_runtime(model, "auto").reason == "lean refused: forward hooks on model.norm (they would be skipped)"


def test_the_trainer_refuses_an_unknown_runtime(small_cfg, tmp_path):
    from reasoning_rl.errors import UserError
    from reasoning_rl.trainer import Trainer

    small_cfg.model.runtime = "fast"  # refused by the config check, before the run folder is written
    with pytest.raises(UserError, match=r"model\.runtime='fast' is unknown; choose one of auto, hf, lean"):
        Trainer(small_cfg, tmp_path)


def test_a_lora_policy_runs_on_hf_and_says_why():
    pytest.importorskip("peft")
    from reasoning_rl.policy.loading import load_model
    from reasoning_rl.settings.model import ModelConfig

    cfg = ModelConfig(tiny=TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64))
    cfg.lora.r = 8
    model, _ = load_model(cfg)
    assert decide_runtime(model, "auto").describe() == (
        "auto -> hf: lean refused: PeftModelForCausalLM: a peft adapter model (model.lora), whose projections "
        "are adapter layers")
