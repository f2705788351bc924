"""The chunked LM head on the hf runtime (reasoning_rl.policy.hf_forward): transformers' decoder gives the
hidden states, the LM head runs a chunk at a time; values, entropies and gradients equal the full-logits
path, with the prompt shared or not, under gradient checkpointing, and for a peft (LoRA) policy."""

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM

from reasoning_rl.batching import pack
from reasoning_rl.policy.hf_forward import chunked_head_refusal
from reasoning_rl.policy.logprobs import completion_logprobs
from reasoning_rl.policy.runtime import RuntimeDecision, set_runtime
from tests.conftest import assert_close_up_to_rounding, decoder_terms

pytestmark = pytest.mark.numerics

PROMPTS = [[5, 6, 7, 8]] * 2 + [[9, 10]] * 2
COMPLETIONS = [[11, 12, 13], [14, 15], [16, 17, 18], [19]]


def _llama(seed=0, vocab=64):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      attn_implementation="eager")
    model = LlamaForCausalLM(cfg)
    set_runtime(model, RuntimeDecision("hf", "hf", "test"))
    return model


def _loss_and_grads(model, chunk, group_size, temperature=1.0, top_k=0):
    batch = pack(PROMPTS, COMPLETIONS, 0)
    model.zero_grad()
    logp, entropy = completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_start,
                                        temperature, with_entropy=True, group_size=group_size, top_k=top_k,
                                        lm_head_chunk=chunk)
    weights = torch.linspace(-1.0, 2.0, logp.numel()).view_as(logp)  # a loss whose gradient reaches every position
    (weights * logp).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), entropy, grads


POSITIONS = 7  # the longest prompt + completion


def _assert_same(a, b, config):
    (logp_a, ent_a, grads_a), (logp_b, ent_b, grads_b) = a, b
    assert_close_up_to_rounding(logp_a, logp_b, terms=decoder_terms(config, POSITIONS))
    assert_close_up_to_rounding(ent_a, ent_b, terms=decoder_terms(config, POSITIONS))
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name, grad in grads_b.items():
        assert_close_up_to_rounding(grads_a[name], grad, terms=decoder_terms(config, POSITIONS, len(PROMPTS)), msg=name)


@pytest.mark.parametrize("group_size", [1, 2])
@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, 0), (0.7, 40)])
def test_chunked_head_on_transformers_modules_equals_full_logits(group_size, temperature, top_k):
    model = _llama()
    model.train()
    chunked = _loss_and_grads(model, 3, group_size, temperature, top_k)
    full = _loss_and_grads(model, 0, group_size, temperature, top_k)
    assert torch.isfinite(full[0]).all()  # every completion token lies in the top-k support
    _assert_same(chunked, full, model.config)
    assert (chunked[0] != 0).sum() == sum(len(c) for c in COMPLETIONS)  # padded positions are exactly 0


def test_chunked_head_under_gradient_checkpointing_equals_without():
    model = _llama()
    model.train()
    plain = _loss_and_grads(model, 3, 2)
    model.activation_checkpointing_enable()
    model.config.use_cache = False
    _assert_same(_loss_and_grads(model, 3, 2), plain, model.config)
    _assert_same(_loss_and_grads(model, 0, 2), plain, model.config)


def test_lora_policy_gets_the_chunked_head_with_the_same_values_and_adapter_gradients():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_llama(), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    set_runtime(model, RuntimeDecision("hf", "hf", "test"))
    with torch.no_grad():  # a trained adapter (peft starts B at zero)
        gen = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    model.train()
    assert chunked_head_refusal(model) is None
    chunked = _loss_and_grads(model, 2, 2)
    full = _loss_and_grads(model, 0, 2)
    _assert_same(chunked, full, model.config)
    assert all("lora_" in name for name in chunked[2])  # only the adapter trains
    batch = pack(PROMPTS, COMPLETIONS, 0)
    with model.disable_adapter(), torch.no_grad():  # the reference: the base with the adapter off, chunked as well
        off = [completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_start,
                                   group_size=2, lm_head_chunk=c)[0] for c in (2, 0)]
    assert_close_up_to_rounding(off[0], off[1], terms=decoder_terms(model.config, POSITIONS))
    assert not torch.allclose(off[0], chunked[0])


def test_models_whose_logits_are_not_lm_head_of_hidden_keep_full_logits():
    cfg = Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=16, final_logit_softcapping=30.0)
    assert "Gemma2ForCausalLM is not one of" in chunked_head_refusal(Gemma2ForCausalLM(cfg))
    model = _llama()
    model.config.logit_scale = 0.5  # a Cohere-style scale on a listed class
    assert "config.logit_scale is set" in chunked_head_refusal(model)
    peft = pytest.importorskip("peft")
    lora_head = peft.get_peft_model(_llama(), peft.LoraConfig(r=2, target_modules=["lm_head"]))
    assert "not a plain nn.Linear" in chunked_head_refusal(lora_head)
    hooked = _llama()
    hooked.lm_head.register_forward_hook(lambda module, args, out: out * 2)
    assert "forward hooks on Linear" in chunked_head_refusal(hooked)
    # ... and such a model still gets its own (full-logits) result from completion_logprobs.
    batch = pack(PROMPTS, COMPLETIONS, 0)
    logp, _ = completion_logprobs(hooked, batch.input_ids, batch.attention_mask, batch.completion_start,
                                  lm_head_chunk=3)
    logits = hooked(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    assert logits.shape[-1] == 64
    expected = _llama()
    set_runtime(expected, RuntimeDecision("hf", "hf", "test"))
    with torch.no_grad():
        expected.lm_head.weight.mul_(2)  # the hook doubles the logits: the same as a doubled head
    want, _ = completion_logprobs(expected, batch.input_ids, batch.attention_mask, batch.completion_start,
                                  lm_head_chunk=3)
    assert_close_up_to_rounding(logp, want, terms=decoder_terms(expected.config, POSITIONS))
