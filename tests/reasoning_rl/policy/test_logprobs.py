"""Per-token log-probs of completions: the training path (each GRPO group's prompt encoded once,
the LM head chunked or not, gradient checkpointing on or off) gives the log-probs, entropies and
gradients of transformers' module forward over full rows."""

import random

import pytest
import torch

from reasoning_rl.batching import pack
from reasoning_rl.policy.lean import lean_decoder_support
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.logprobs import completion_logprobs, selective_log_softmax
from reasoning_rl.settings.model import TinyModelConfig
from tests.conftest import assert_close_up_to_rounding, decoder_terms
from tests.reasoning_rl.conftest import assert_runs_train_alike

pytestmark = pytest.mark.numerics


def _model(arch):
    return build_tiny_model(TinyModelConfig(arch=arch, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64))


def _groups(tok, group_size):
    """Prompts of different lengths (left padding) and completions of 1-4 tokens (right padding)."""
    rng = random.Random(0)
    prompts, completions = [], []
    for text in ("What is 3 + 4? Answer: ", "What is 13 + 14? Answer: ", "Compute 1+2: "):
        for _ in range(group_size):
            prompts.append(tok(text, add_special_tokens=False)["input_ids"])
            answer = str(rng.randint(0, 999))[: rng.randint(1, 3)]
            completions.append(tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    return pack(prompts, completions, tok.pad_token_id)


def test_selective_log_softmax_matches_log_softmax_gather():
    logits = torch.randn(5, 7, 11)
    tokens = torch.randint(0, 11, (5, 7))
    expected = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    # One log-softmax over the 11 logits of a row, in chunks of rows or whole.
    assert_close_up_to_rounding(selective_log_softmax(logits, tokens, chunk_rows=2), expected, terms=11)
    assert_close_up_to_rounding(selective_log_softmax(logits, tokens), expected, terms=11)  # one chunk
    assert_close_up_to_rounding(selective_log_softmax(logits, tokens, chunk_elements=7 * 11 * 3), expected,
                                terms=11)  # 3 rows each


def _module_logprobs(model, batch, temperature):
    """The reference: transformers' own module forward over full rows, ``model(input_ids).logits``,
    then ``log_softmax`` at the temperature; log-probs and entropies ``[B, L]`` of the completions."""
    position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids,
                   use_cache=False).logits  # [B, P+L, V]
    logits = logits[:, batch.completion_start - 1:-1] / temperature  # [B, L, V]: position t predicts t + 1
    logp = logits.log_softmax(-1).gather(-1, batch.input_ids[:, batch.completion_start:, None]).squeeze(-1)
    probs = logits.detach().softmax(-1)
    return logp, -(probs * probs.log()).sum(-1)


def _loss_and_grads(model, fn, mask):
    """Log-probs, entropies and parameter gradients of the masked mean log-prob."""
    logp, entropy = fn()
    model.zero_grad(set_to_none=True)
    ((logp * mask).sum() / mask.sum()).backward()
    return logp.detach(), entropy, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("group_size", [1, 4])
@pytest.mark.parametrize("chunk", [0, 5])  # full logits; the LM head 5 positions at a time
def test_training_log_probs_are_the_module_forward(arch, temperature, group_size, chunk):
    """The lean path (each group's prompt once, LM head chunked or not) against transformers' module
    forward: log-probs, entropies and every parameter's gradient."""
    torch.manual_seed(0)
    model, tok = _model(arch)
    model.train()
    batch = _groups(tok, group_size=4)
    mask = batch.completion_mask
    on = mask.bool()
    lean_logp, lean_entropy, lean_grads = _loss_and_grads(model, lambda: completion_logprobs(
        model, batch.input_ids, batch.attention_mask, batch.completion_start, temperature, with_entropy=True,
        group_size=group_size, lm_head_chunk=chunk), mask)
    module_logp, module_entropy, module_grads = _loss_and_grads(
        model, lambda: _module_logprobs(model, batch, temperature), mask)
    assert (lean_logp[~on] == 0).all() and (lean_entropy[~on] == 0).all()
    rows, positions = batch.input_ids.shape
    values = decoder_terms(model.config, positions)
    assert_close_up_to_rounding(lean_logp[on], module_logp[on], terms=values)
    assert_close_up_to_rounding(lean_entropy[on], module_entropy[on], terms=values)
    for name, grad in module_grads.items():
        assert_close_up_to_rounding(lean_grads[name], grad, terms=decoder_terms(model.config, positions, rows), msg=name)


def _saved_bytes(fn):
    """Bytes of the tensors autograd keeps for the backward while ``fn()`` runs, and its result."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return total[0], out


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("chunk", [0, 5])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients_and_keeps_less(arch, chunk):
    torch.manual_seed(0)
    model, tok = _model(arch)
    model.train()
    batch = _groups(tok, group_size=4)
    mask = batch.completion_mask

    def run():
        def forward():
            return completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_start, 0.7,
                                       with_entropy=True, group_size=4, lm_head_chunk=chunk)
        saved, out = _saved_bytes(forward)
        return saved, _loss_and_grads(model, lambda: out, mask)

    plain_saved, (plain_logp, plain_entropy, plain_grads) = run()
    model.activation_checkpointing_enable()
    assert lean_decoder_support(model) is None  # its input-grad hook does not send the model to the module path
    kept_saved, (kept_logp, kept_entropy, kept_grads) = run()
    rows, positions = batch.input_ids.shape
    values = decoder_terms(model.config, positions)
    assert_close_up_to_rounding(kept_logp, plain_logp, terms=values)
    assert_close_up_to_rounding(kept_entropy, plain_entropy, terms=values)
    for name, grad in plain_grads.items():
        assert_close_up_to_rounding(kept_grads[name], grad, terms=decoder_terms(model.config, positions, rows), msg=name)
    assert kept_saved < plain_saved / 2, (kept_saved, plain_saved)  # each layer keeps its input, not its insides


def test_gradient_checkpointing_on_the_module_path_with_groups():
    """A model the lean forward refuses (here: a forward hook) runs transformers' modules; under
    gradient checkpointing they keep no key/value cache, so a shared prompt cannot be reused:
    full rows instead, the same numbers (this crashed with 'NoneType' ... 'batch_repeat_interleave')."""
    torch.manual_seed(0)
    model, tok = _model("llama")
    model.train()
    model.model.norm.register_forward_hook(lambda module, args, out: None)
    model.activation_checkpointing_enable()
    assert lean_decoder_support(model) is not None
    batch = _groups(tok, group_size=4)
    mask = batch.completion_mask
    logp, _, grads = _loss_and_grads(model, lambda: completion_logprobs(
        model, batch.input_ids, batch.attention_mask, batch.completion_start, group_size=4), mask)
    want, _, want_grads = _loss_and_grads(model, lambda: _module_logprobs(model, batch, 1.0), mask)
    on = mask.bool()
    rows, positions = batch.input_ids.shape
    assert_close_up_to_rounding(logp[on], want[on], terms=decoder_terms(model.config, positions))
    for name, grad in want_grads.items():
        assert_close_up_to_rounding(grads[name], grad, terms=decoder_terms(model.config, positions, rows), msg=name)


def test_a_training_step_with_gradient_checkpointing_and_the_shared_prompt_forward(small_cfg, tmp_path):
    """Regression: model.gradient_checkpointing=true with algo.shared_prompt_forward=true (the
    default) crashed the update; now it trains exactly like the run without checkpointing."""
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    small_cfg.algo.micro_batch_size = 8
    assert small_cfg.algo.shared_prompt_forward
    for checkpointing in (True, False):
        small_cfg.model.gradient_checkpointing = checkpointing
        trainer = Trainer(small_cfg, tmp_path / str(checkpointing))
        try:
            trainer.train()
        finally:
            trainer.close()
    on, off = (read_metrics(tmp_path / str(c) / "metrics.jsonl") for c in (True, False))
    assert len(on) == len(off) == 2
    assert_runs_train_alike((on, off), small_cfg, trainer.model.config)  # checkpointing: the same sums, reordered


def test_shared_prompt_forward_refuses_rows_that_are_not_groups():
    model, tok = _model("llama")
    batch = _groups(tok, group_size=4)
    with pytest.raises(ValueError, match="share one prompt"):
        completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_start, group_size=3)
    with pytest.raises(ValueError, match="groups of 5"):
        completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_start, group_size=5)


class _PadLogitsDown(torch.nn.Module):
    """A policy whose <pad> logit is -1e4 everywhere: log pi(<pad>) ~ -1e4 at padded positions."""

    def __init__(self, model, pad_id):
        super().__init__()
        self.model, self.pad_id = model, pad_id

    def forward(self, **kwargs):
        out = self.model(**kwargs)
        logits = out.logits.clone()
        logits[..., self.pad_id] = -1e4
        out.logits = logits
        return out


@pytest.mark.parametrize("group_size", [1, 2])
def test_padded_positions_are_zero_whatever_the_pad_logit(group_size):
    from reasoning_rl.algo.losses import KLConfig, LossGroups, PolicyLossConfig, grpo_loss

    model, tok = _model("llama")
    hostile = _PadLogitsDown(model, tok.pad_token_id)
    hostile.config = model.config
    prompts, comps = [], []
    for text, answer in (("What is 3 + 4? Answer: ", "7"), ("What is 13 + 14? Answer: ", "27")):
        for _ in range(group_size):
            prompts.append(tok(text, add_special_tokens=False)["input_ids"])
            comps.append(tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    comps[-1] = comps[-1] + comps[-1]  # one longer completion: the others are right-padded
    packed = pack(prompts, comps, tok.pad_token_id)
    logp, entropy = completion_logprobs(hostile, packed.input_ids, packed.attention_mask, packed.completion_start,
                                        with_entropy=True, group_size=group_size)
    pads = packed.completion_mask == 0
    assert pads.any()
    assert (logp[pads] == 0).all() and (entropy[pads] == 0).all()
    # With beta > 0 against a zero-filled reference row the loss and its gradient stay finite.
    ref = torch.where(pads, 0.0, logp.detach() - 0.1)
    out = grpo_loss(logp, logp.detach(), ref, torch.linspace(-1, 1, packed.input_ids.shape[0]), packed.completion_mask,
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.04)))
    out.loss.backward()
    assert torch.isfinite(out.loss) and all(torch.isfinite(p.grad).all() for p in model.parameters()
                                            if p.grad is not None)


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 0.9), (5, 1.0), (5, 0.7), (1, 1.0), (0, 0.01)])
def test_sampling_support_is_what_transformers_samples_from(top_k, top_p):
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from reasoning_rl.policy.logprobs import sampling_support

    torch.manual_seed(0)
    scores = torch.randn(6, 40) * 3
    warped = scores
    if top_k:
        warped = TopKLogitsWarper(top_k)(None, warped)
    if top_p < 1.0:
        warped = TopPLogitsWarper(top_p)(None, warped)
    assert torch.equal(sampling_support(scores, top_k, top_p), torch.isfinite(warped))


def test_truncated_sampling_log_probs_are_renormalised_over_the_support():
    # Greedy completions are always inside the top-k set. Their log-probs renormalised over the
    # k kept tokens are >= the full-softmax ones, and the entropy over the support is <= the full one.
    model, tok = _model("llama")
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("What is 3 + 4? Answer: ", "Compute 1+2: ")]
    comps = []
    with torch.no_grad():
        for p in prompts:
            out = model.generate(torch.tensor([p]), max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
            comps.append(out[0, len(p):].tolist())
    packed = pack(prompts, comps, tok.pad_token_id)
    args = (model, packed.input_ids, packed.attention_mask, packed.completion_start)
    full, entropy_full = completion_logprobs(*args, with_entropy=True)
    kept, entropy_kept = completion_logprobs(*args, with_entropy=True, top_k=8)
    real = packed.completion_mask.bool()
    assert torch.isfinite(kept[real]).all()
    assert (kept[real] >= full[real] - 1e-6).all() and (kept[real] > full[real]).any()
    assert torch.isfinite(entropy_kept).all() and (entropy_kept[real] <= entropy_full[real] + 1e-5).all()
