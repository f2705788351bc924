"""What a rollout is: how completions are sampled (:class:`SamplingConfig`), one sampled
completion (:class:`Completion`), a step's rollouts asked for ahead (:class:`Request`), the engine protocol every sampler implements
(:class:`RolloutEngine`), and stop strings (:func:`cut_at_stop`; :func:`stop_settled`, when a decode loop
may stop a row at one).

The engines themselves live with the policy runtimes: ``hf`` and ``native`` in
:mod:`reasoning_rl.policy.engines` (with :func:`~reasoning_rl.policy.engines.make_engine`), the
vLLM engines (training rollouts and evaluation) in :mod:`reasoning_rl.policy.vllm`. Training and
evaluation use the same engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

FinishReason = Literal["stop", "length"]


@dataclass
class SamplingConfig:
    """How completions are sampled."""

    temperature: float = 1.0
    """Softmax temperature; also used to scale logits when computing training log-probs."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off)."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 = off)."""
    max_new_tokens: int = 256
    """Longest completion, in tokens; longer ones are cut and marked ``finish_reason="length"``."""
    do_sample: bool = True
    """False = greedy decoding (temperature, top_p, top_k ignored)."""
    stop: list[str] = field(default_factory=list)
    """Extra stop strings: the completion is cut before the first one (EOS always stops)."""


@dataclass
class Completion:
    """One sampled completion."""

    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    prompt_token_ids: list[int] = field(default_factory=list)
    policy_version: int | None = None
    """The policy version that sampled it (RL steps behind the weights; None = not tracked)."""
    logprobs: list[float] | None = None
    """The engine's own log-prob of each sampled token under the distribution it was drawn from
    (after temperature, top-k and top-p; greedy: under the temperature-1 distribution), one per
    token id; every engine reports them (hf, native, vLLM). The trainer recomputes its own for the
    loss and only compares the two (mismatch metrics, off-policy corrections)."""
    loss_mask: list[int] | None = None
    """One 0/1 per token id: 1 on tokens the policy sampled, 0 on tokens it was given (a multi-turn
    episode's observations, reasoning_rl.envs.episode), which the loss and every per-token statistic
    leave out; their ``logprobs`` are NaN. None = every token was sampled (single-turn)."""
    ref_logprobs: list[float] | None = None
    """log pi_ref of each token the completion is trained as (an empty one: its EOS), computed by the
    asynchronous generator process (reasoning_rl.algo.batch.ReferenceJob); the update then skips its own
    reference forward. None = not computed there (the update computes them)."""

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class Request:
    """One step's rollouts, said ahead of time: ``n`` samples of each prompt at ``seed``. An algorithm
    says what its step ``step`` will sample (``Algorithm.next_request``); the asynchrony layer
    (reasoning_rl.rollouts.async_engine) sets ``version``, the weights it is sampled with, and sends it
    to its generator process."""

    step: int
    prompts: list[str]
    n: int
    sampling: SamplingConfig
    seed: int
    version: int | None = None
    """The policy version whose weights sample it (max(0, step - k) for rollout.max_staleness=k)."""
    references: list[Any] | None = None
    """Each prompt's reference answer, and below its fields: with them the generator scores the rewards."""
    fields: list[dict[str, Any]] | None = None

    @classmethod
    def of_examples(cls, step: int, examples: Sequence[Any], n: int, sampling: SamplingConfig,
                    seed: int) -> Request:
        """The request of ``n`` samples of each of ``examples`` (task examples: prompt, reference, fields)."""
        return cls(step=step, prompts=[e.prompt for e in examples], n=n, sampling=sampling, seed=seed,
                   references=[e.reference for e in examples], fields=[dict(e.fields) for e in examples])


class RolloutEngine(Protocol):
    """Samples ``n`` completions for each prompt, grouped per prompt, in prompt order."""

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[Completion]]: ...


def check_id_rows(prompt_ids: Sequence[Sequence[int]]) -> None:
    """The one precondition of every engine's ``generate_from_ids``: at least one row, none empty."""
    if not prompt_ids or any(len(ids) == 0 for ids in prompt_ids):
        raise ValueError("generate_from_ids needs at least one prompt, each with at least one token id")


def cut_at_stop(ids: list[int], text: str, stops: list[str], tokenizer: Any) -> tuple[list[int], str, bool]:
    """Cut the completion before the first stop string; token ids are cut at the
    shortest prefix whose decoding contains it (the stop string's tokens are kept,
    like an EOS, so the policy is trained to emit it)."""
    positions = [text.find(s) for s in stops if s and s in text]
    if not positions:
        return ids, text, False
    cut = min(positions)
    for k in range(1, len(ids) + 1):
        decoded = tokenizer.decode(ids[:k], skip_special_tokens=True)
        if len(decoded) > cut and any(s in decoded for s in stops):
            return ids[:k], text[:cut], True
    return ids, text[:cut], True


def stop_settled(text: str, stops: Sequence[str], lookahead: int = 0) -> bool:
    """True when :func:`cut_at_stop` cuts ``text`` at the same character as every longer text that begins
    with it, so a decode loop may finish the row now: the tokens it would still sample are cut off anyway.

    ``text`` is the decoding of a row's tokens so far. A continuation's decoding is taken to begin with it
    (decoding is prefix-stable), except where a tokenizer changes the end of a text once more tokens follow:

    - an incomplete character at the end (a byte-level token holding its first bytes decodes to U+FFFD
      until the rest arrives): never settled while the text ends in one;
    - with ``lookahead`` = k > 0, the last k characters (a tokenizer that cleans up spaces on decode,
      ``" ." -> "."``, may still delete a space there).

    Settled when all of:

    - a stop string occurs; ``cut`` = the first position where one begins (empty strings never count);
    - no stop string can still begin before ``cut``: no proper prefix of one ends the text at a position
      before ``cut`` (stops ``"b"`` and ``"abc"`` on text ``"ab"``: ``"b"`` at 1, but ``"abc"`` may
      still begin at 0);
    - with ``lookahead``: the text runs at least ``longest + lookahead`` characters past ``cut``, so no
      character that may change lies where a stop string beginning at or before ``cut`` would end.
    """
    stops = [s for s in stops if s]
    positions = [p for p in (text.find(s) for s in stops) if p >= 0]
    if not positions or text.endswith("\ufffd"):
        return False
    cut = min(positions)
    if lookahead:
        return len(text) - cut >= max(map(len, stops)) + lookahead
    # a proper prefix s[:j] ending the text begins at len(text) - j
    return not any(len(text) - j < cut and text.endswith(s[:j]) for s in stops for j in range(1, len(s)))
