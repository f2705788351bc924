"""The memory planner: its terms on hand-worked numbers, its activation count against the
tensors autograd really keeps, and plans of composed configs."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hydra import compose, initialize_config_module
from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM

from reasoning_rl.batching import pack
from reasoning_rl.cli import to_train_config
from reasoning_rl.policy.logprobs import completion_logprobs
from reasoning_rl.policy.planner import (
    GB,
    Workload,
    activation_bytes,
    estimate,
    gradient_bytes,
    hf_layer_floats,
    layer_floats,
    optimizer_bytes,
    reference_bytes,
    trainable_parameters,
    weights_bytes,
)
from reasoning_rl.policy.runtime import RuntimeDecision, set_runtime
from reasoning_rl.policy.shapes import KNOWN_CONFIGS, ModelShape, shape_of

SMALL = ModelShape(architecture="LlamaForCausalLM", parameters=1000, hidden=8, layers=2, heads=2, kv_heads=1,
                   head_dim=4, intermediate=16, vocab=50, tied=True, source="test",
                   linears=(("model.layers.0.self_attn.q_proj", 8, 8), ("model.layers.0.mlp.up_proj", 8, 16)))
WORK = Workload(group_size=4, prompts_per_step=2, micro_batch_rows=8, prompt_tokens=8, completion_tokens=5,
                reference=True, checkpointing=False, lm_head_chunk=0, weight_bytes=4, activation_bytes=4,
                rollout_backend="hf", rollout_batch=8)


def _cfg(*overrides: str):
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        return to_train_config(compose(config_name="train", overrides=list(overrides)))


def test_state_terms_on_hand_worked_numbers():
    # 1000 fp32 parameters: weights 4000 bytes, the reference a copy (beta > 0), one gradient
    # each, AdamW's two moments each.
    assert weights_bytes(SMALL, WORK) == 4000
    assert reference_bytes(SMALL, WORK) == 4000
    assert gradient_bytes(SMALL, WORK) == 4000
    assert optimizer_bytes(SMALL, WORK) == 8000
    assert reference_bytes(SMALL, dataclasses.replace(WORK, reference=False)) == 0


def test_lora_trains_only_the_adapter_and_holds_no_reference_copy():
    lora = dataclasses.replace(WORK, lora_rank=2, lora_targets=("q_proj",))
    # q_proj is 8 -> 8: A [2, 8] + B [8, 2] = 2 (8 + 8) = 32 trained parameters; up_proj untouched.
    assert trainable_parameters(SMALL, lora) == 32
    assert gradient_bytes(SMALL, lora) == 32 * 4 and optimizer_bytes(SMALL, lora) == 2 * 32 * 4
    assert weights_bytes(SMALL, lora) == (1000 + 32) * 4
    assert reference_bytes(SMALL, lora) == 0  # the base with the adapter disabled


def test_layer_floats_on_hand_worked_numbers():
    # D 8, H 2 x d 4, H_kv 1, I 16; 4 queries attending to 12 keys:
    # norms 6 * 8 + 2 = 50; queries + heads' output 2 * 8 = 16; SDPA's log-sum-exp 2;
    # MLP 4 * 16 = 64; keys and values 2 * 1 * 4 * 12 / 4 = 24 per query -> 156.
    assert layer_floats(SMALL, keys=12, queries=4, cpu=False) == 156
    # On a CPU with 4 x 12 = 48 <= 1,024 scores a head: the softmax 2 * 12 = 24 instead of 2 -> 178.
    assert layer_floats(SMALL, keys=12, queries=4, cpu=True) == 178


def test_checkpointing_keeps_layer_inputs_only():
    full = activation_bytes(SMALL, WORK, rows=8, cpu=False)
    ckpt = activation_bytes(SMALL, dataclasses.replace(WORK, checkpointing=True), rows=8, cpu=False)
    # 8 rows x 4 completion positions, 2 prompts x 8 positions, 2 layers:
    # inputs (32 + 16) * 8 = 384 and prompt keys/values 8 rows * 2 * 1 * 4 * 8 = 512 a layer,
    # plus one layer recomputed, plus the LM head's 3 D per completion position (768).
    comp = layer_floats(SMALL, keys=12, queries=4, cpu=False)
    prompt = layer_floats(SMALL, keys=8, queries=8, cpu=False)
    one_layer = 32 * comp + 16 * prompt
    assert ckpt == (2 * (384 + 512) + one_layer + 768) * 4
    assert full == (2 * one_layer + 768) * 4
    assert ckpt < full


def _saved_elements(layers: int, prompt: int, completion: int, runtime: str = "lean") -> int:
    """Elements of the distinct tensors autograd saves in the training log-probs (no weights)."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=96, num_hidden_layers=layers, num_attention_heads=6,
                                         num_key_value_heads=2, intermediate_size=200, vocab_size=500,
                                         tie_word_embeddings=True, attn_implementation="sdpa")).train()
    set_runtime(model, RuntimeDecision(runtime, runtime, "test"))
    gen = torch.Generator().manual_seed(1)
    heads = [torch.randint(3, 500, (prompt,), generator=gen).tolist() for _ in range(2)]
    rows = [heads[i // 4] for i in range(8)]
    packed = pack(rows, [torch.randint(3, 500, (completion,), generator=gen).tolist() for _ in rows], pad_id=0)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params and t.is_floating_point():
            saved[storage.data_ptr()] = storage.nbytes() // t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        completion_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_start, 1.0,
                            with_entropy=True, group_size=4, lm_head_chunk=100)
    return sum(saved.values())


@pytest.mark.parametrize(("prompt", "completion"), [(7, 50), (12, 12)])  # SDPA; the CPU's matmul attention
def test_layer_floats_equal_what_autograd_keeps(prompt, completion):
    # One more layer adds exactly one layer's saved tensors: 8 rows x (c - 1) completion
    # positions and 2 prompts x p positions.
    per_layer = _saved_elements(2, prompt, completion) - _saved_elements(1, prompt, completion)
    shape = shape_of(LlamaConfig(hidden_size=96, num_hidden_layers=1, num_attention_heads=6, num_key_value_heads=2,
                                 intermediate_size=200, vocab_size=500, tie_word_embeddings=True), "test")
    c = completion - 1
    predicted = 8 * c * layer_floats(shape, prompt + c, c, cpu=True) + 2 * prompt * layer_floats(
        shape, prompt, prompt, cpu=True)
    assert predicted == pytest.approx(per_layer, rel=0.02)


def test_hf_layer_floats_equal_what_autograd_keeps():
    # transformers' modules: each prompt once, then 8 rows x 127 completion positions against its cache.
    per_layer = _saved_elements(2, 64, 128, "hf") - _saved_elements(1, 64, 128, "hf")
    shape = shape_of(LlamaConfig(hidden_size=96, num_hidden_layers=1, num_attention_heads=6, num_key_value_heads=2,
                                 intermediate_size=200, vocab_size=500, tie_word_embeddings=True), "test")
    predicted = 8 * 127 * hf_layer_floats(shape, 64 + 127, 127) + 2 * 64 * hf_layer_floats(shape, 64, 64)
    assert predicted == pytest.approx(per_layer, rel=0.02)


def test_off_the_cpu_auto_runs_hf_and_keeps_the_chunked_head_for_llama_classes():
    # A 49,152-token vocabulary (auto chunk 682 positions) on an 80 GB GPU: auto -> hf (model.runtime),
    # where a Llama's head is chunked too (reasoning_rl.policy.hf_forward); lm_head_chunk=0 gives full logits.
    shape = shape_of(AutoConfig.for_model(**KNOWN_CONFIGS["smollm2-135m-instruct"]), "table")
    cfg = _cfg("rollout.max_new_tokens=64")
    cfg.model.lm_head_chunk = "auto"
    auto = estimate(cfg, device_gb=80, config=AutoConfig.for_model(**KNOWN_CONFIGS["smollm2-135m-instruct"]))
    assert auto.workload.runtime == "hf" and auto.workload.lm_head_chunk == 682 == 2 ** 25 // shape.vocab
    assert "LM head (682-position chunk)" in auto.components
    cfg.model.lm_head_chunk = "0"
    full = estimate(cfg, device_gb=80, config=AutoConfig.for_model(**KNOWN_CONFIGS["smollm2-135m-instruct"]))
    assert full.components["LM head (full logits)"] > auto.components["LM head (682-position chunk)"]
    cfg.model.lm_head_chunk = "auto"
    cfg.model.lora.r, cfg.model.lora.target_modules = 8, ["q_proj", "lm_head"]  # an adapter on the head: full logits
    assert "LM head (full logits)" in estimate(cfg, device_gb=80, config=AutoConfig.for_model(
        **KNOWN_CONFIGS["smollm2-135m-instruct"])).components


@pytest.mark.parametrize(("experiment", "hub_name", "device_gb"), [
    ("gsm8k_qwen05b", "Qwen/Qwen2.5-0.5B-Instruct", 80), ("gsm8k_qwen05b", "Qwen/Qwen2.5-0.5B-Instruct", 24),
    ("math_qwen15b", "Qwen/Qwen2.5-Math-1.5B", 80)])
def test_shipped_gpu_presets_fit_at_g16_x_8_prompts_x_1024_tokens(experiment, hub_name, device_gb):
    cfg = _cfg(f"experiment={experiment}", "algo.group_size=16", "algo.prompts_per_step=8",
               "rollout.max_new_tokens=1024")
    assert cfg.trainer.precision == "bf16" and cfg.model.dtype == "float32"  # fp32 master weights
    plan = estimate(cfg, device_gb=device_gb, config=AutoConfig.for_model(**KNOWN_CONFIGS[hub_name]))
    assert plan.fits and plan.workload.chunked_head, plan.summary()


def test_shapes_from_the_built_in_table_count_the_published_parameters():
    qwen05 = shape_of(AutoConfig.for_model(**KNOWN_CONFIGS["Qwen/Qwen2.5-0.5B-Instruct"]), "table")
    qwen15 = shape_of(AutoConfig.for_model(**KNOWN_CONFIGS["Qwen/Qwen2.5-Math-1.5B"]), "table")
    smol = shape_of(AutoConfig.for_model(**KNOWN_CONFIGS["smollm2-135m-instruct"]), "table")
    assert round(qwen05.parameters / 1e6) == 494 and round(qwen15.parameters / 1e6) == 1544  # 0.49B, 1.54B
    assert round(smol.parameters / 1e5) == 1345  # 134.5M (docs/models.md)
    assert (qwen05.hidden, qwen05.layers, qwen05.kv_heads, qwen05.head_dim, qwen05.vocab) == (896, 24, 2, 64, 151936)


def test_the_default_run_fits_and_a_small_device_does_not():
    cfg = _cfg()
    plan = estimate(cfg)
    assert plan.fits and plan.largest_micro_batch >= plan.workload.micro_batch_rows
    assert plan.model.source == "model.tiny" and plan.model.parameters == 1_062_656
    held = sum(plan.components[k] for k in ("base (process / CUDA context)", "weights", "reference", "optimiser states"))
    assert plan.peak_bytes > held and plan.phase in ("update", "rollout", "frozen log-probs")
    assert "fits" in plan.summary()
    tight = estimate(cfg, device_gb=0.1)
    assert not tight.fits and tight.largest_micro_batch == 0 and "DOES NOT FIT" in tight.summary()


def test_checkpointing_and_a_smaller_micro_batch_lower_the_peak():
    base = estimate(_cfg("algo.micro_batch_size=128", "rollout.max_new_tokens=64"), device_gb=80)
    ckpt = estimate(_cfg("algo.micro_batch_size=128", "rollout.max_new_tokens=64", "model.gradient_checkpointing=true"),
                    device_gb=80)
    small = estimate(_cfg("algo.micro_batch_size=8", "rollout.max_new_tokens=64"), device_gb=80)
    assert ckpt.peak_bytes < base.peak_bytes and small.peak_bytes < base.peak_bytes
    assert base.device_bytes == 80 * GB


def test_the_run_header_line_and_its_warning_when_the_plan_does_not_fit(caplog):
    from reasoning_rl.policy.loading import build_tiny_model
    from reasoning_rl.policy.planner import log_plan

    model, tokenizer = build_tiny_model()
    prompts = ["What is 2 + 2?", "What is 12 * 34? Answer with a number."]  # the longest: 38 characters
    with caplog.at_level("INFO", logger="reasoning_rl.policy.planner"):
        plan = log_plan(_cfg(), model, tokenizer, prompts)
    assert plan.workload.prompt_tokens == 38 and plan.fits
    assert any(r.levelname == "INFO" and r.getMessage().startswith("memory plan: peak") for r in caplog.records)
    # 1,024 rows of 4,096 tokens in one micro-batch: hundreds of GB of activations on any CPU here.
    huge = _cfg("algo.prompts_per_step=128", "algo.micro_batch_size=1024", "rollout.max_new_tokens=4096",
                "model.tiny.max_position_embeddings=8192")
    caplog.clear()
    with caplog.at_level("INFO", logger="reasoning_rl.policy.planner"):
        assert not log_plan(huge, model, tokenizer, prompts).fits
    assert any(r.levelname == "WARNING" and "lower algo.micro_batch_size" in r.getMessage() for r in caplog.records)
