"""The lean decode step computes the model's own next-token logits: every step against a full
forward of the model over prompt + tokens so far, for Llama and Qwen2, with left padding,
grouped-query attention, prompts shared by several rows, and in bfloat16; unknown models are
refused with a reason and the native engine then runs the model's modules."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from reasoning_rl.decode import LeanDecoder, lean_decoder_support
from reasoning_rl.models import TinyModelConfig, build_tiny_model
from reasoning_rl.rollout import NativeEngine, SamplingConfig

PROMPTS = ["What is 3 + 4? Answer: ", "1+2=", "What is 3 + 4? Answer: ", "12*3 is"]  # padding; a shared prompt


def _tokenizer():
    return build_tiny_model(TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32))[1]


def _model(arch: str, kv_heads: int, dtype=torch.float32):
    tok = _tokenizer()
    shape = dict(vocab_size=len(tok), hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                 num_key_value_heads=kv_heads, intermediate_size=96, max_position_embeddings=128)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**shape)) if arch == "llama" else Qwen2ForCausalLM(Qwen2Config(**shape))
    return model.to(dtype).eval(), tok


def _lean_and_full_logits(model, tok, new_tokens=6):
    enc = tok(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    with torch.inference_mode():
        decoder = LeanDecoder(model)
        steps = [decoder.prefill(ids, mask, new_tokens)]
        chosen = []
        for _ in range(new_tokens - 1):
            chosen.append(steps[-1].argmax(-1))
            steps.append(decoder.step(chosen[-1]))
        full_ids = torch.cat([ids, torch.stack(chosen, 1)], 1)
        full_mask = torch.cat([mask, torch.ones(len(PROMPTS), new_tokens - 1, dtype=mask.dtype)], 1)
        positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
        full = model(input_ids=full_ids, attention_mask=full_mask, position_ids=positions).logits
    return torch.stack(steps, 1), full[:, ids.shape[1] - 1:]


@pytest.mark.parametrize("arch,kv_heads", [("llama", 6), ("llama", 2), ("qwen2", 3), ("qwen2", 1)])
def test_every_step_is_the_full_forward(arch, kv_heads):
    model, tok = _model(arch, kv_heads)
    lean, full = _lean_and_full_logits(model, tok)
    assert lean.shape == full.shape
    torch.testing.assert_close(lean, full, rtol=1e-5, atol=1e-5)


def test_bfloat16_matches_the_module_forward_to_its_precision():
    model, tok = _model("llama", 2, torch.bfloat16)
    lean, full = _lean_and_full_logits(model, tok, new_tokens=3)
    assert lean.dtype == torch.bfloat16
    torch.testing.assert_close(lean.float(), full.float(), rtol=0.05, atol=0.05)


def test_an_unknown_model_is_refused_with_a_reason():
    model, _ = _model("llama", 2)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.config = model, model.config

    assert "Wrapped is not one of" in lean_decoder_support(Wrapped())
    model.config.hidden_act = "gelu"
    assert "hidden_act='gelu'" in lean_decoder_support(model)
    with pytest.raises(ValueError, match="LeanDecoder cannot run this model: hidden_act"):
        LeanDecoder(model)


def test_the_engine_samples_the_same_tokens_with_and_without_it():
    # Same seed, same draws in the same order, logits equal to rounding: the same samples.
    model, tok = _model("qwen2", 3)
    sampling = SamplingConfig(max_new_tokens=10, temperature=0.8, top_p=0.9)
    lean = NativeEngine(model, tok).generate(PROMPTS[:2], 4, sampling, seed=5)
    module = NativeEngine(model, tok, lean=False).generate(PROMPTS[:2], 4, sampling, seed=5)
    assert [[c.token_ids for c in g] for g in lean] == [[c.token_ids for c in g] for g in module]


def test_the_engine_rebuilds_the_decoder_when_the_weights_change():
    model, tok = _model("llama", 2)
    engine = NativeEngine(model, tok)
    first = engine.lean_decoder()
    assert engine.lean_decoder() is first  # fixed weights (evaluation): built once
    greedy = SamplingConfig(max_new_tokens=5, do_sample=False)
    before = engine.generate(PROMPTS[:2], 1, greedy)
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # an in-place update, as an optimiser step makes
    assert engine.lean_decoder() is not first
    after = engine.generate(PROMPTS[:2], 1, greedy)
    reference = NativeEngine(model, tok, lean=False).generate(PROMPTS[:2], 1, greedy)
    assert [g[0].token_ids for g in after] == [g[0].token_ids for g in reference] != [g[0].token_ids for g in before]
    assert NativeEngine(model, tok, lean=False).lean_decoder() is None
