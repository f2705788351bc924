"""LoRA through peft (model.lora): only the adapter trains, the reference is the base with the adapter
off, checkpoints hold the adapter and resume, export merges it into a plain model folder."""

import json
import math

import pytest
import torch

pytest.importorskip("peft")

from reasoning_rl.algo.optim import build_optimizer
from reasoning_rl.batching import pack
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.memory import training_state_bytes
from reasoning_rl.policy.loading import load_model, load_pretrained
from reasoning_rl.policy.logprobs import completion_logprobs, frozen_logprobs
from reasoning_rl.policy.lora import AdapterDisabled, is_lora, merged_state_dict, trainable_parameters
from reasoning_rl.settings.model import LoRAConfig, ModelConfig, TinyModelConfig
from reasoning_rl.validation import validate
from tests.conftest import assert_close_up_to_rounding, decoder_terms

TINY = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
PROMPTS = [[5, 6, 7, 8]] * 2 + [[9, 10]] * 2
COMPLETIONS = [[11, 12, 13], [14, 15], [16, 17, 18], [19]]
POSITIONS = 7  # the longest prompt + completion


def _assert_same(actual, expected, model, rows=0, msg=""):
    """Equal up to rounding (tests/conftest.py's rule): one decoder chain over POSITIONS, with an adapter's rank
    more terms in each adapted projection; gradients sum over ``rows`` rows."""
    terms = decoder_terms(model.config, POSITIONS, rows) + TINY.num_layers * 8  # r = 4 at most, two adapted projections
    assert_close_up_to_rounding(actual, expected, terms=terms, msg=msg)


def _lora_model(r=4, targets=("q_proj", "v_proj"), **kwargs):
    cfg = ModelConfig(tiny=TINY, lora=LoRAConfig(r=r, alpha=8.0, target_modules=list(targets)), **kwargs)
    model, tokenizer = load_model(cfg)
    return model, tokenizer


def _perturb_adapter(model, seed=0):
    """A trained adapter, the same for every model built alike: peft starts B at zero (the adapter adds
    nothing) and draws A from the global RNG, so give both seeded random values."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))


def _logprobs(model, pad, group_size=2):
    return torch.cat(frozen_logprobs(model, PROMPTS, COMPLETIONS, pad, 1.0, 4, group_size=group_size))


def test_only_the_adapter_is_trainable_and_its_counts_are_the_low_rank_shapes():
    model, _ = _lora_model(r=4)
    assert is_lora(model)
    trainable, total = trainable_parameters(model)
    # q_proj and v_proj are 32 x 32 in each of 2 layers; each adapter is A [4, 32] + B [32, 4] = 256 numbers.
    assert trainable == 2 * 2 * (4 * 32 + 32 * 4) == 1024
    base, _ = load_model(ModelConfig(tiny=TINY))
    assert total == sum(p.numel() for p in base.parameters()) + trainable
    optimizer, _ = build_optimizer(model.parameters(), _algo(), total_updates=1)
    assert sum(p.numel() for group in optimizer.param_groups for p in group["params"]) == 1024


def _algo():
    from reasoning_rl.algo.grpo import GRPOConfig

    return GRPOConfig()


@pytest.mark.numerics
def test_the_reference_is_the_base_model_with_the_adapter_off():
    model, tok = _lora_model()
    _perturb_adapter(model)
    base, _ = load_model(ModelConfig(tiny=TINY))  # the same seeded initialisation, no adapter
    ref = AdapterDisabled(model)
    with_adapter, reference, plain = (_logprobs(m, tok.pad_token_id) for m in (model, ref, base))
    assert (with_adapter - plain).abs().max() > 1e-2  # the adapter changes the policy...
    _assert_same(reference, plain, base)  # ...and the reference is the base
    assert ref.policy is model  # the view holds no copy
    assert {id(p) for p in ref.parameters()} == {id(p) for p in model.parameters()}
    # memory accounting counts the shared tensors once
    assert training_state_bytes([model, ref], [])["parameters"] == training_state_bytes([model], [])["parameters"]


@pytest.mark.numerics
def test_shared_prompt_forward_of_a_lora_policy_equals_the_full_forward():
    model, tok = _lora_model()
    _perturb_adapter(model)
    _assert_same(_logprobs(model, tok.pad_token_id, group_size=2), _logprobs(model, tok.pad_token_id, group_size=1),
                 model)


@pytest.mark.numerics
def test_gradient_checkpointing_with_lora_gives_the_same_log_probs_and_gradients():
    results = []
    for checkpointing in (False, True):
        model, tok = _lora_model(gradient_checkpointing=checkpointing)
        _perturb_adapter(model)
        model.train()
        packed = pack(PROMPTS, COMPLETIONS, tok.pad_token_id)
        logp, _ = completion_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_start,
                                      group_size=2)
        logp.sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results.append((logp.detach(), grads))
    _assert_same(results[0][0], results[1][0], model)
    for name, grad in results[0][1].items():
        _assert_same(grad, results[1][1][name], model, rows=len(PROMPTS), msg=name)


@pytest.mark.numerics
def test_merged_weights_are_peft_merge_and_unload():
    model, _ = _lora_model()
    _perturb_adapter(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    merged = merged_state_dict(model)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # the policy is left as it was
    reference = {k: v.clone() for k, v in model.merge_and_unload().state_dict().items()}
    assert set(merged) == set(reference)
    for key, tensor in reference.items():
        assert_close_up_to_rounding(merged[key], tensor, terms=4 + 1, msg=key)  # W + s * B A: r = 4 products and W
    assert all("lora" not in k and "base_layer" not in k for k in merged)


def test_a_lora_run_trains_the_adapter_only_and_checkpoints_it(small_cfg, tmp_path):
    from reasoning_rl.trainer import Trainer

    small_cfg.model.lora.r = 4
    small_cfg.trainer.steps = 2
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        summary = trainer.train()
        model = trainer.model
        # One more update with fixed advantages (the tiny model's rewards may all be 0, and with B = 0
        # the policy is its reference, so the KL term pulls nowhere either).
        ro = trainer.algorithm.rollout(2)
        ro.advantages = torch.linspace(-1.0, 1.0, len(ro.completions))
        metrics = trainer.algorithm.update(ro)
    finally:
        trainer.close()
    assert metrics["grad/norm"] > 0
    ckpt = tmp_path / "run" / "checkpoint-2"
    names = {p.name for p in ckpt.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "base_model.json"} <= names
    assert "model.safetensors" not in names  # the base is rebuilt from base_model.json, not stored
    assert not (tmp_path / "run" / "reference").exists()  # beta > 0, yet no copy of the model was written
    assert json.loads((ckpt / "base_model.json").read_text())["tiny"]["hidden_size"] == 32
    base, _ = load_model(small_cfg.model.__class__(tiny=small_cfg.model.tiny))
    trained_base = {n.replace("base_model.model.", "").replace(".base_layer", ""): p
                    for n, p in model.named_parameters() if "lora_" not in n}
    for name, p in base.named_parameters():
        assert torch.equal(trained_base[name], p), name  # the base never moved
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert any(p.abs().max() > 0 for p in lora_b)  # B starts at zero: the adapter was trained
    # reloads as a trainable peft model (what resume and reasoning-rl-eval use): the checkpoint's weights
    reloaded, _ = load_pretrained(str(ckpt))
    assert is_lora(reloaded)
    names = [n for n, _ in model.named_parameters()]
    assert names == [n for n, _ in reloaded.named_parameters()]
    assert [p.requires_grad for p in model.parameters()] == [p.requires_grad for p in reloaded.parameters()]
    assert all(torch.equal(p, base_p) for p, base_p in zip(
        [p for n, p in reloaded.named_parameters() if "lora_" not in n],
        [p for n, p in model.named_parameters() if "lora_" not in n], strict=True))
    # AdamW state of the adapter only (r = 4, hidden 32, MLP 64, all 7 linear layers of 2 blocks):
    #   q, k, v, o: A [4, 32] + B [32, 4] = 256 each        -> 1024
    #   gate, up:   A [4, 32] + B [64, 4] = 384 each        ->  768
    #   down:       A [4, 64] + B [32, 4] = 384             ->  384   => 2176 a block, 4352 in all
    # two float32 moments: 2 * 4 * 4352 = 34816 bytes, plus a float32 step counter per tensor: 28 * 4 = 112
    assert summary["memory"]["optimizer_gb"] * 1024 ** 3 == 34816 + 112


@pytest.mark.numerics
def test_a_resumed_lora_run_matches_the_uninterrupted_run(small_cfg, tmp_path, resume_matches_uninterrupted_run):
    small_cfg.model.lora.r = 4
    resume_matches_uninterrupted_run(small_cfg, tmp_path)


@pytest.mark.numerics
def test_export_merges_the_adapter_into_a_plain_model_folder(small_cfg, tmp_path):
    from transformers import AutoModelForCausalLM

    from reasoning_rl.export import main
    from reasoning_rl.trainer import Trainer

    small_cfg.model.lora.r = 4
    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.train()
        model, tok = trainer.model, trainer.tokenizer
    finally:
        trainer.close()
    out = tmp_path / "merged"
    assert main([str(tmp_path / "run" / "checkpoint-2"), str(out)]) == 0
    assert (out / "config.json").is_file() and (out / "prompting.json").is_file()
    assert not (out / "adapter_config.json").exists()
    plain = AutoModelForCausalLM.from_pretrained(out)
    assert not is_lora(plain)
    model.eval()
    _assert_same(_logprobs(plain, tok.pad_token_id), _logprobs(model, tok.pad_token_id), model)
    assert main([str(tmp_path / "run" / "checkpoint-2"), str(out)]) == 2  # the output exists: a user error


def test_lora_settings_that_cannot_run_are_refused(small_cfg):
    small_cfg.model.lora.r = 4
    small_cfg.trainer.fsdp = True
    small_cfg.algo.kl.ref_reset_every = 5
    with pytest.raises(ConfigError) as err:
        validate(small_cfg)
    assert "trainer.fsdp" in str(err.value) and "ref_reset_every" in str(err.value)
    small_cfg.trainer.fsdp, small_cfg.algo.kl.ref_reset_every = False, 0
    small_cfg.model.lora.r = -1
    with pytest.raises(ConfigError, match=r"model\.lora\.r"):
        validate(small_cfg)


def test_an_unknown_target_module_names_the_model_linear_layers():
    from reasoning_rl.errors import UserError

    with pytest.raises(UserError, match="q_proj"):
        _lora_model(targets=("qkv",))


def test_reasoning_rl_eval_accepts_an_adapter_checkpoint(small_cfg, tmp_path):
    """reasoning-rl-eval model=<LoRA checkpoint>: the base rebuilt, the adapter on, the run's own greedy
    held-out accuracy reproduced (same problems, same prompting, same length)."""
    from benchmarks.config import EvalConfig
    from benchmarks.runner import run
    from reasoning_rl.rollouts.sampling import SamplingConfig
    from reasoning_rl.trainer import Trainer

    small_cfg.model.lora.r = 4
    small_cfg.trainer.steps = 2
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        summary = trainer.train()
        greedy = SamplingConfig(max_new_tokens=small_cfg.rollout.max_new_tokens, do_sample=False)
        prompts = [e.prompt for e in trainer.eval_examples]
        completions = [g[0].text for g in trainer.engine.generate(prompts, 1, greedy, seed=0)]
    finally:
        trainer.close()
    [result] = run(EvalConfig(model_name_or_path=str(tmp_path / "run" / "checkpoint-2"), benchmark="arithmetic",
                              limit=small_cfg.evaluation.num_examples, output_dir=str(tmp_path / "eval"),
                              progress=False, backend="hf", device="cpu", score_workers=1,
                              max_new_tokens=small_cfg.rollout.max_new_tokens))
    assert result["metrics"]["accuracy"]["value"] == summary["eval_after"]["greedy_accuracy"]
    [cache_file] = (tmp_path / "eval").glob("*--checkpoint-2/arithmetic/problems.jsonl")
    cached = [json.loads(line)["completions"][0] for line in cache_file.read_text().splitlines()]
    assert cached == completions  # the trained adapter's own greedy completions, token for token


@pytest.mark.numerics
def test_the_vllm_engine_is_handed_the_merged_weights_after_a_step():
    """The weight sync of VLLMRolloutEngine around a stand-in for vllm.LLM that keeps what it is given:
    plain Hugging Face names, and weights that, loaded into a plain model, compute the LoRA policy."""
    from transformers import AutoModelForCausalLM

    from reasoning_rl.policy.vllm import VLLMRolloutEngine

    class FakeLLM:
        def __init__(self):
            self.weights = None

        def collective_rpc(self, method, kwargs):
            assert method == "reload_weights"
            self.weights = dict(kwargs["weights_iterator"])

    model, tok = _lora_model()
    llm = FakeLLM()
    engine = VLLMRolloutEngine(llm, tok, model, check_logprobs=False)
    _perturb_adapter(model)  # "a training step"
    engine.update_policy(model, version=1)
    plain = AutoModelForCausalLM.from_config(model.get_base_model().config)
    missing, unexpected = plain.load_state_dict(llm.weights, strict=False)
    assert not unexpected and all("rotary" in k for k in missing)  # vllm_weights drops rotary caches only
    model.eval()
    # Merged weights (W + BA, rounded once) against the adapter's two products: the decoder's chain plus the
    # adapter's rank, at log-prob scale (about log V).
    expected = _logprobs(model, tok.pad_token_id)
    assert_close_up_to_rounding(_logprobs(plain.eval(), tok.pad_token_id), expected,
                                terms=decoder_terms(model.config, positions=64) + 4,
                                scale=max(float(expected.abs().max()), math.log(model.config.vocab_size)))
