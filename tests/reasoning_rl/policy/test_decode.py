"""The lean decode step computes the model's own next-token logits: every step against a full
forward of the model over prompt + tokens so far, for Llama and Qwen2, with left padding,
grouped-query attention, prompts shared by several rows, and in bfloat16; unknown models are
refused with a reason and the native engine then runs the model's modules."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from reasoning_rl.policy.engines import NativeEngine
from reasoning_rl.policy.lean import LeanDecoder, group_size, lean_decoder_support
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.settings.model import TinyModelConfig
from tests.conftest import assert_close_up_to_rounding, decoder_terms

pytestmark = pytest.mark.numerics

PROMPTS = ["What is 3 + 4? Answer: ", "1+2=", "What is 3 + 4? Answer: ", "12*3 is"]  # padding; a shared prompt
POSITIONS = 64  # every call here: a prompt of at most 25 tokens and at most 8 new ones


def _tokenizer():
    return build_tiny_model(TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32))[1]


def _model(arch: str, kv_heads: int, dtype=torch.float32, **config):
    tok = _tokenizer()
    shape = dict(vocab_size=len(tok), hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                 num_key_value_heads=kv_heads, intermediate_size=96, max_position_embeddings=128)
    shape.update(config)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**shape)) if arch == "llama" else Qwen2ForCausalLM(Qwen2Config(**shape))
    return model.to(dtype).eval(), tok


def _lean_and_full_logits(model, tok, new_tokens=6, prompts=PROMPTS, cached=None):
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    with torch.inference_mode():
        decoder = LeanDecoder(model)
        steps = [decoder.prefill(ids, mask, new_tokens)]
        chosen = []
        for _ in range(new_tokens - 1):
            chosen.append(steps[-1].argmax(-1))
            steps.append(decoder.step(chosen[-1]))
        full_ids = torch.cat([ids, torch.stack(chosen, 1)], 1)
        full_mask = torch.cat([mask, torch.ones(len(prompts), new_tokens - 1, dtype=mask.dtype)], 1)
        positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
        full = model(input_ids=full_ids, attention_mask=full_mask, position_ids=positions).logits
    if cached is not None:
        cached.append(decoder.prompts_cached)
    return torch.stack(steps, 1), full[:, ids.shape[1] - 1:]


@pytest.mark.parametrize("arch,kv_heads", [("llama", 6), ("llama", 2), ("qwen2", 3), ("qwen2", 1)])
def test_every_step_is_the_full_forward(arch, kv_heads):
    model, tok = _model(arch, kv_heads)
    lean, full = _lean_and_full_logits(model, tok)
    assert lean.shape == full.shape
    assert_close_up_to_rounding(lean, full, terms=decoder_terms(model.config, POSITIONS))


@pytest.mark.parametrize("arch,kv_heads,rows,caches", [
    ("llama", 6, [p for p in PROMPTS for _ in range(3)], 4),
    ("qwen2", 3, [p for p in PROMPTS for _ in range(3)], 4),
    ("llama", 1, [p for p in PROMPTS for _ in range(3)], 4),
    ("qwen2", 3, [PROMPTS[0]] * 3, 1),  # one group: grouped-query heads, U = 1
    ("llama", 2, [PROMPTS[0]] * 4 + [PROMPTS[1]] * 2, 3),  # runs of 4 and 2: groups of 2
])
def test_groups_sharing_a_prompt_keep_one_cache_and_give_the_full_forward(arch, kv_heads, rows, caches):
    """Rows in groups of G equal consecutive prompts (as the engines build them) keep one
    prompt cache per group; every row's logits are still its full forward's."""
    model, tok = _model(arch, kv_heads)
    cached = []
    lean, full = _lean_and_full_logits(model, tok, prompts=rows, cached=cached)
    assert_close_up_to_rounding(lean, full, terms=decoder_terms(model.config, POSITIONS))
    assert cached == [caches]


def test_rotary_scaling_sees_the_whole_sequence_as_the_full_forward_does():
    # LongRoPE picks its frequencies from the longest position of the call: prompts shorter
    # than original_max_position_embeddings (8) that grow past it while decoding must get the
    # long factors for their prompt positions too, as the full forward (and training) gives them.
    rope = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [4.0] * 4,
            "original_max_position_embeddings": 8, "factor": 4.0}
    model, tok = _model("llama", 2, max_position_embeddings=32, rope_scaling=rope)
    lean, full = _lean_and_full_logits(model, tok, new_tokens=8, prompts=["1+2="] * 2 + ["12*3 is"] * 2)
    assert_close_up_to_rounding(lean, full, terms=decoder_terms(model.config, POSITIONS))


def test_group_size_is_the_common_length_of_runs_of_equal_rows():
    ids = torch.tensor([[1, 2], [1, 2], [3, 4], [3, 4], [5, 6], [5, 6]])
    mask = torch.ones_like(ids)
    assert group_size(ids, mask) == 2
    assert group_size(ids[:5], mask[:5]) == 1  # runs of 2, 2, 1
    assert group_size(ids[[0, 2, 1, 3]], mask[:4]) == 1  # equal prompts, not neighbours
    assert group_size(ids[:2], mask[:2]) == 2
    assert group_size(ids[:1], mask[:1]) == 1
    assert group_size(ids[[0, 0, 0, 0, 2, 2]], mask) == 2  # runs of 4 and 2
    assert group_size(ids[[0, 0, 0]], mask[:3]) == 3
    other_mask = mask.clone()
    other_mask[1, 0] = 0  # same ids, different padding: not the same prompt
    assert group_size(ids, other_mask) == 1


def test_bfloat16_matches_the_module_forward_to_its_precision():
    model, tok = _model("llama", 2, torch.bfloat16)
    lean, full = _lean_and_full_logits(model, tok, new_tokens=3)
    assert lean.dtype == torch.bfloat16
    # bf16 throughout: the rule with bfloat16's eps (7.8e-3); each layer's output is rounded to bf16 once more.
    assert_close_up_to_rounding(lean.float(), full.float(), terms=decoder_terms(model.config, POSITIONS),
                                dtype=torch.bfloat16)


def test_an_unknown_model_is_refused_with_a_reason():
    model, _ = _model("llama", 2)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.config = model, model.config

    assert "Wrapped is not one of" in lean_decoder_support(Wrapped())
    handle = model.model.layers[0].register_forward_hook(lambda *args: None)
    assert "forward hooks on model.layers.0" in lean_decoder_support(model)
    handle.remove()

    class LoraLinear(torch.nn.Linear):  # what an adapter library puts in place of a projection
        pass

    original = model.model.layers[1].self_attn.q_proj
    model.model.layers[1].self_attn.q_proj = LoraLinear(original.in_features, original.out_features)
    assert "self_attn.q_proj is not a plain nn.Linear" in lean_decoder_support(model)
    model.model.layers[1].self_attn.q_proj = original
    assert lean_decoder_support(model) is None
    model.config.attention_dropout = 0.1  # dropout is applied in training mode only
    assert "attention dropout 0.1 in training mode" in lean_decoder_support(model.train())
    assert lean_decoder_support(model.eval()) is None
    model.config.attention_dropout = 0.0
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


@pytest.mark.parametrize("batch_size", [4, 5, 2])
def test_the_engine_batches_whole_groups_and_samples_as_the_module_path(batch_size):
    # n = 3 samples per prompt: a batch of 4 or 5 rows holds one whole group (3 rows), one of 2
    # rows part of a group; grouped-query heads. The same samples as the module path.
    model, tok = _model("qwen2", 3)
    sampling = SamplingConfig(max_new_tokens=6, temperature=0.8)
    lean = NativeEngine(model, tok, batch_size=batch_size).generate(PROMPTS[:3], 3, sampling, seed=4)
    module = NativeEngine(model, tok, batch_size=batch_size, lean=False).generate(PROMPTS[:3], 3, sampling, seed=4)
    assert [[c.token_ids for c in g] for g in lean] == [[c.token_ids for c in g] for g in module]


def test_the_engine_leaves_a_training_policy_in_training_mode_and_samples_as_in_eval_mode():
    # The lean decoder has no dropout in either mode: the engine does not switch the policy's
    # mode (a walk over every module), and its samples are those of the model in eval mode.
    model, tok = _model("llama", 2)
    sampling = SamplingConfig(max_new_tokens=6)
    in_eval = NativeEngine(model.eval(), tok).generate(PROMPTS[:2], 3, sampling, seed=2)
    model.train()
    switches = []
    original = model.train
    model.train = lambda mode=True: switches.append(mode) or original(mode)
    in_training = NativeEngine(model, tok).generate(PROMPTS[:2], 3, sampling, seed=2)
    assert switches == [] and model.training
    assert [[c.token_ids for c in g] for g in in_training] == [[c.token_ids for c in g] for g in in_eval]
    NativeEngine(model, tok, lean=False).generate(PROMPTS[:2], 1, sampling, seed=2)  # the module path needs eval
    assert switches == [False, True] and model.training


def test_the_engine_follows_an_in_place_weight_update():
    # The trainer's optimiser changes the parameters in place between two generate calls.
    model, tok = _model("llama", 2)
    engine = NativeEngine(model, tok)
    greedy = SamplingConfig(max_new_tokens=5, do_sample=False)
    before = engine.generate(PROMPTS[:2], 1, greedy)
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)
    after = engine.generate(PROMPTS[:2], 1, greedy)
    reference = NativeEngine(model, tok, lean=False).generate(PROMPTS[:2], 1, greedy)
    assert [g[0].token_ids for g in after] == [g[0].token_ids for g in reference] != [g[0].token_ids for g in before]


@pytest.mark.parametrize("kv_heads", [6, 2])
def test_matmul_attention_equals_scaled_dot_product_attention(kv_heads, monkeypatch):
    # Short sequences on a CPU take two matmuls; long ones (here forced) scaled_dot_product_attention.
    from reasoning_rl.policy.lean import layers as decode

    torch.manual_seed(0)
    q = torch.randn(3, 6, 5, 8, requires_grad=True)
    k, v = (torch.randn(3, kv_heads, 9, 8, requires_grad=True) for _ in range(2))
    visible = torch.ones(3, 1, 5, 9, dtype=torch.bool).tril(4)
    visible[0, :, :, :2] = False  # left padding of row 0
    bias = decode.additive_mask(visible, torch.float32)

    def run():
        out = decode.attention(q, k, v, bias)
        grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), (q, k, v))
        return out.detach(), grads

    matmul = run()
    monkeypatch.setattr(decode, "MATMUL_ATTENTION_MAX_SCORES", 0)
    sdpa = run()
    terms = 8 + 9 + 5  # q.k over d = 8, the softmax and weighted sum over 9 keys, the gradients' sum over 5 queries
    assert_close_up_to_rounding(matmul[0], sdpa[0], terms=terms)
    for a, b in zip(matmul[1], sdpa[1]):
        assert_close_up_to_rounding(a, b, terms=terms)


@pytest.mark.parametrize("kv_heads,length,u", [(6, 1, 2), (2, 1, 2), (2, 3, 2), (2, 1, 1), (3, 2, 1)])
def test_shared_prefix_attention_is_attention_over_the_copied_prefix(kv_heads, length, u):
    # Groups of 3 rows share a left-padded prefix and see all their own keys (a decode step, or
    # several queries that may see every own key). Values and gradients, prefix included,
    # against attention() over each row's own copy of the prefix.
    from reasoning_rl.policy.lean import layers as decode

    torch.manual_seed(0)
    g, p, s, d = 3, 5, 4, 8
    q = torch.randn(u * g, 6, length, d, requires_grad=True)
    prefix_k, prefix_v = (torch.randn(u, kv_heads, p, d, requires_grad=True) for _ in range(2))
    k, v = (torch.randn(u * g, kv_heads, s, d, requires_grad=True) for _ in range(2))
    valid = torch.ones(u, p, dtype=torch.bool)
    valid[-1, :2] = False  # the last prefix is left-padded
    weights = torch.linspace(-1, 1, q.numel()).view_as(q)

    def grads(out):
        return torch.autograd.grad((out * weights).sum(), (q, prefix_k, prefix_v, k, v))

    shared = decode.shared_prefix_attention(q, prefix_k, prefix_v,
                                            decode.additive_mask(valid[:, None, None, :], torch.float32), k, v)
    visible = torch.cat([valid.repeat_interleave(g, 0), torch.ones(u * g, s, dtype=torch.bool)], dim=1)
    copied = decode.attention(q, torch.cat([prefix_k.repeat_interleave(g, 0), k], 2),
                              torch.cat([prefix_v.repeat_interleave(g, 0), v], 2),
                              decode.additive_mask(visible[:, None, None, :].expand(-1, 1, length, -1), torch.float32))
    # q.k over d, the softmax and weighted sum over p + s keys; a prefix's gradient sums over its g rows' 6 heads.
    terms = d + p + s + g * 6 * length
    assert_close_up_to_rounding(shared, copied, terms=terms)
    for a, b in zip(grads(shared), grads(copied)):
        assert_close_up_to_rounding(a, b, terms=terms)


@pytest.mark.parametrize("fuse", [True, False])
def test_fused_and_plain_projections_give_the_same_logits(fuse):
    model, tok = _model("qwen2", 3)
    enc = tok(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    with torch.inference_mode():
        logits = LeanDecoder(model, fuse=fuse).prefill(enc["input_ids"], enc["attention_mask"], 2)
        plain = LeanDecoder(model, fuse=False).prefill(enc["input_ids"], enc["attention_mask"], 2)
    assert_close_up_to_rounding(logits, plain, terms=decoder_terms(model.config, POSITIONS))


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("arch,kv_heads,group_size", [("llama", 2, 2), ("qwen2", 3, 1), ("qwen2", 1, 4)])
def test_training_logits_and_gradients_are_the_module_forward(arch, kv_heads, group_size, packed, monkeypatch):
    # packed: the completions' right padding dropped (one packed sequence), or kept.
    from reasoning_rl.policy.hf_forward import shared_prompt_forward
    from reasoning_rl.policy.lean import training as decode

    monkeypatch.setattr(decode, "PACK_MIN_PADDING", 0.0 if packed else 2.0)
    completion_logits = decode.completion_logits

    model, tok = _model(arch, kv_heads)
    model.train()
    prompts = [PROMPTS[i % 2] for i in range(4) for _ in range(group_size)]  # rows of a group share a prompt
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    torch.manual_seed(1)
    completions = torch.randint(3, len(tok), (len(prompts), 5))
    ids = torch.cat([enc["input_ids"], completions], 1)
    mask = torch.cat([enc["attention_mask"], torch.ones_like(completions)], 1)
    mask[::3, -2:] = 0  # some completions end early (right padding)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    p = enc["input_ids"].shape[1]
    real = mask[:, p:].bool()[..., None]

    def loss_and_grads(fn):
        model.zero_grad()
        logits = fn(model, ids, mask, positions, p, group_size)
        (logits.log_softmax(-1) * real).sum().backward()
        return logits.detach(), {n: q.grad.clone() for n, q in model.named_parameters()}

    lean, lean_grads = loss_and_grads(completion_logits)
    if group_size > 1:
        module, module_grads = loss_and_grads(lambda m, i, a, pos, p, g: shared_prompt_forward(m, "logits", i, a, pos, p, g))
    else:
        module, module_grads = loss_and_grads(
            lambda m, i, a, pos, p, g: m(input_ids=i, attention_mask=a, position_ids=pos).logits[:, p - 1:-1])
    assert_close_up_to_rounding(lean * real, module * real, terms=decoder_terms(model.config, POSITIONS))
    for name, grad in module_grads.items():  # in float64 the two agree to 4e-16 of the gradient's scale
        assert_close_up_to_rounding(lean_grads[name], grad, terms=decoder_terms(model.config, POSITIONS, len(prompts)),
                                    msg=name)
