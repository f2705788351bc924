"""``warmstart.mask_observations``: the warm start leaves the environment's observations out of its loss.

The environment says where its observations are in a reference text (``Environment.observation_spans``);
the warm start tokenizes the pieces apart, as the episode runner does, and gives the observation tokens
loss mask 0 (reasoning_rl.warmstart.masked_target)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
import torch

from reasoning_rl.batching import pack
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.envs import Environment, StepResult, register_environment, unregister_environment
from reasoning_rl.envs.code_feedback import CodeFeedback
from reasoning_rl.envs.python_tool import PythonTool
from reasoning_rl.policy.loading import build_char_tokenizer
from reasoning_rl.policy.logprobs import completion_logprobs
from reasoning_rl.settings.evaluation import WarmStartConfig
from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task
from reasoning_rl.validation import validate
from reasoning_rl.warmstart import (
    ObservationMaskedSFT,
    environment_observations,
    masked_target,
    warm_start_targets,
)
from tests.conftest import assert_close_up_to_rounding, decoder_terms, rounding_atol
from tests.reasoning_rl.conftest import tiny_model_config
from tests.reasoning_rl.envs.conftest import build_bpe_tokenizer


class FixedOutput(PythonTool):
    """python_tool whose program "prints" a given text, without the sandbox."""

    def __init__(self, output: str) -> None:
        super().__init__()
        self.output = output

    def run(self, code: str):
        return self.output, "ok"


def _multiply_tool_targets(n: int = 3):
    examples = Task(TaskConfig(name="multiply_tool")).examples("train")[:n]
    return warm_start_targets(examples, WarmStartConfig(target="solution"))


# -- where the observations are ------------------------------------------------------------------------

def test_python_tool_spans_are_what_its_step_appends():
    for e in _multiply_tool_targets():
        [(start, end)] = PythonTool().observation_spans(e.solution)
        # step() gets the turn up to its stop marker and answers with the observation that follows it.
        assert e.solution[start:end] == FixedOutput(e.reference).step(e.solution[:start]).observation
        assert e.solution[start:end] == f"\n{e.reference}\n```\n"
        assert e.solution[end:] == f"The answer is {e.reference}."
    two_calls = "```python\nprint(1)\n```\n```output\n1\n```\n```python\nprint(2)\n```\n```output\n2\n```\nSo 2."
    assert [two_calls[a:b] for a, b in PythonTool().observation_spans(two_calls)] == ["\n1\n```\n", "\n2\n```\n"]
    assert PythonTool().observation_spans("The answer is 3.") == []
    assert Environment().observation_spans("```output\n1\n```\n") == []  # the default: no observations


def test_code_feedback_spans_are_the_feedback_lines_and_the_retry_prompt():
    """code_synthetic_feedback's targets: a wrong attempt, the feedback and "    return " again, the fix."""
    options = {"max_failures": 1, "retry_prompt": "last_line"}  # conf/task/code_synthetic_feedback.yaml
    examples = Task(TaskConfig(name="code_synthetic_feedback")).examples("train")[:20]
    spans_of = environment_observations("code_feedback", options)
    retries = 0
    for e in examples:
        text, spans = e.solution, spans_of(e)
        if "\n# " not in text:  # the right answer at once: nothing observed
            assert spans == [] and text == f"{e.reference}\n"
            continue
        retries += 1
        [(start, end)] = spans
        observation = text[start:end]
        assert text[:start].endswith("\n") and "\n" not in text[:start - 1]  # after the first attempt's stop
        assert observation.startswith("# ") and observation.endswith("\n    return ")
        assert all(line.startswith("# ") for line in observation.splitlines()[:-1])
        assert text[end:] == f"{e.reference}\n"  # the fix is trained on
    assert retries >= 5
    # Without reset the prompt is unknown: the feedback lines alone, no retry prompt.
    env = CodeFeedback(retry_prompt="last_line")
    text = "x + 4\n# 0 of 9 tests passed\n# test 1: f(-7) returned -3, expected -4\n    return x + 3\n"
    assert [text[a:b] for a, b in env.observation_spans(text)] == [
        "# 0 of 9 tests passed\n# test 1: f(-7) returned -3, expected -4\n"]


# -- the tokens the loss leaves out -------------------------------------------------------------------

def test_masked_positions_are_exactly_the_observation_tokens_of_a_multiply_tool_reference():
    tok = build_char_tokenizer()  # the tiny model's tokenizer: one token per character
    for e in _multiply_tool_targets():
        [(start, end)] = PythonTool().observation_spans(e.solution)
        target = masked_target(tok, e.solution, [(start, end)])
        # The ids are the unmasked target's (the whole text, then EOS): only the mask is new.
        assert list(target) == tok(e.solution, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert target.loss_mask == [1] * start + [0] * (end - start) + [1] * (len(e.solution) - end) + [1]
        masked = [t for t, m in zip(target, target.loss_mask) if not m]
        assert tok.decode(masked) == f"\n{e.reference}\n```\n"


def test_pieces_are_tokenized_apart_as_the_episode_runner_does():
    """A BPE merges across the observation's edges when the text is tokenized whole; the episode runner
    tokenizes an observation on its own, and so does the masked target."""
    tok = build_bpe_tokenizer()
    text = "```python\nprint(123 * 456)\n```\n```output\n56088\n```\nThe answer is 56088."
    [(start, end)] = PythonTool().observation_spans(text)
    target = masked_target(tok, text, [(start, end)])
    pieces = [tok(p, add_special_tokens=False)["input_ids"] for p in (text[:start], text[start:end], text[end:])]
    assert list(target) == pieces[0] + pieces[1] + pieces[2] + [tok.eos_token_id]
    assert target.loss_mask == [1] * len(pieces[0]) + [0] * len(pieces[1]) + [1] * len(pieces[2]) + [1]
    assert masked_target(tok, text, []) == tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    with pytest.raises(ValueError, match="sorted, disjoint and inside"):
        masked_target(tok, text, [(5, 9), (7, 12)])


# -- the warm start's loss --------------------------------------------------------------------------------

class Ok(Environment):
    """Answers every "=" with " ok\\n"; its observations in a text are the " ok\\n" after each "="."""

    stop = ("=",)

    def step(self, model_text: str) -> StepResult:
        return StepResult(observation=" ok\n")

    def observation_spans(self, text: str) -> list[tuple[int, int]]:
        return [(i + 1, i + 5) for i in range(len(text)) if text.startswith("= ok\n", i)]


@pytest.fixture
def ok_env():
    register_environment("ok_warmstart_test")(Ok)
    yield "ok_warmstart_test"
    unregister_environment("ok_warmstart_test")


def _warm_start_cfg(small_cfg, env: str, mask: bool):
    cfg = replace(small_cfg)
    cfg.task.env = env
    cfg.task.episode.max_turns = 2
    cfg.task.episode.max_tokens = 12
    cfg.warmstart = WarmStartConfig(enabled=True, max_steps=2, check_every=1, batch_size=4, probe_size=2,
                                    stop_at_accuracy=1.0, target_suffix="= ok\n", mask_observations=mask)
    cfg.evaluation.enabled = False
    return cfg


def _run_warm_start(cfg, run_dir, expected_loss: bool = False):
    """(losses of the 2 steps, the weights after, and the first step's NLL recomputed by hand)."""
    from reasoning_rl.trainer import Trainer

    trainer = Trainer(cfg, run_dir)
    try:
        by_hand = _first_step_loss_by_hand(trainer, cfg) if expected_loss else None
        result = trainer._warm_start()
        weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    finally:
        trainer.close()
    return [h["loss"] for h in result["history"]], weights, by_hand


def _first_step_loss_by_hand(trainer, cfg):
    """The token mean of -log pi over the first batch's trained tokens (loss mask 1), before any update."""
    w = cfg.warmstart
    examples = warm_start_targets(trainer.train_examples, w)
    rng = random.Random(cfg.trainer.seed)  # reasoning_rl.warmstart.DrawWithReplacement
    batch = [examples[rng.randrange(len(examples))] for _ in range(w.batch_size)]
    tok = trainer.tokenizer
    spans = environment_observations(cfg.task.env, {})
    targets = [masked_target(tok, e.solution, spans(e) if w.mask_observations else []) for e in batch]
    prompts = [tok(e.prompt, add_special_tokens=False)["input_ids"] for e in batch]
    packed = pack(prompts, targets, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = completion_logprobs(trainer.model, packed.input_ids, packed.attention_mask,
                                      packed.completion_start, 1.0)  # [B, L]
    mask = packed.completion_mask  # [B, L] 0 on " ok\n" when masked, and on padding
    assert mask.sum() == sum(len(t) - (4 if w.mask_observations else 0) for t in targets)  # one " ok\n" each
    return float(-(logp * mask).sum() / mask.sum())


@pytest.mark.numerics
def test_the_loss_leaves_the_observation_tokens_out(small_cfg, tmp_path, ok_env):
    losses, _, by_hand = _run_warm_start(_warm_start_cfg(small_cfg, ok_env, mask=True), tmp_path / "on", True)
    # The warm start's loss and the same mean of -log pi by hand: the decoder's chain, then the batch's tokens
    # summed (under 64 rows of under 64 positions), at the scale of a log-prob (about log V) or the loss's own.
    config = tiny_model_config(small_cfg.model.tiny)
    terms = decoder_terms(config, positions=64) + 64 * 64
    scale = max(abs(by_hand), math.log(config.vocab_size))
    assert_close_up_to_rounding(losses[0], by_hand, terms=terms, scale=scale, msg="masked")
    unmasked, _, by_hand_all = _run_warm_start(_warm_start_cfg(small_cfg, ok_env, mask=False), tmp_path / "off",
                                               True)
    assert_close_up_to_rounding(unmasked[0], by_hand_all, terms=terms, scale=scale, msg="unmasked")
    assert abs(losses[0] - unmasked[0]) > rounding_atol(by_hand, terms, scale=scale)  # " ok\n" was in the off run's mean


def test_with_nothing_to_mask_the_loss_is_the_unmasked_one_bit_for_bit(small_cfg, tmp_path, ok_env):
    """The option on with no observation in the targets (no "= ok\\n" suffix) trains exactly as the option off."""
    on = _warm_start_cfg(small_cfg, ok_env, mask=True)
    on.warmstart.target_suffix = ""
    off = _warm_start_cfg(small_cfg, ok_env, mask=False)
    off.warmstart.target_suffix = ""
    on_losses, on_weights, _ = _run_warm_start(on, tmp_path / "on")
    off_losses, off_weights, _ = _run_warm_start(off, tmp_path / "off")
    assert on_losses == off_losses
    assert all(torch.equal(on_weights[n], off_weights[n]) for n in off_weights)


def test_masking_needs_an_environment(small_cfg):
    cfg = replace(small_cfg)
    cfg.warmstart = WarmStartConfig(enabled=True, mask_observations=True)
    with pytest.raises(ConfigError,
                       match=r"mask_observations=true masks the observations of task\.env, which is null"):
        validate(cfg)


def test_each_target_is_encoded_once():
    """The spans of a target need an environment built and reset: the masked warm start finds them
    once per target, not at every step that draws it."""
    from types import SimpleNamespace

    tok = build_char_tokenizer()
    calls = []

    def spans(example):
        calls.append(example)
        return [(2, 4)]

    sft = ObservationMaskedSFT(SimpleNamespace(cfg=SimpleNamespace(algo=None), tokenizer=tok), spans)
    a, b = (SimpleNamespace(solution=text) for text in ("12 = ok", "34 = no"))
    first = sft.encode_examples([a, b, a])
    again = sft.encode_examples([b, a])
    assert calls == [a, b]
    assert first[0] is first[2] is again[1] and first[1] is again[0]
    expected = masked_target(tok, "12 = ok", [(2, 4)])
    assert list(first[0]) == list(expected) and first[0].loss_mask == expected.loss_mask
