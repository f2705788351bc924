"""Fixtures for the episode tests: a small BPE tokenizer whose decode/re-encode is not the identity,
and a scripted engine that "samples" given texts one character token at a time."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from reasoning_rl.rollouts.sampling import Completion, SamplingConfig, cut_at_stop

CORPUS = "```python\nprint(123 * 456)\n```\n```output\n56088\n```\nThe answer is 56088.\n"


@pytest.fixture(scope="session")
def bpe_tokenizer():
    """A byte-level BPE trained on the tool format: ``print`` is one token, so the five character
    tokens p, r, i, n, t decode to text that re-encodes to different ids."""
    return build_bpe_tokenizer()


def build_bpe_tokenizer():
    """The tokenizer of the :func:`bpe_tokenizer` fixture (for tests outside this folder)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>", "<pad>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 50, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")


def char_ids(tokenizer, text: str) -> list[int]:
    """``text`` as one token per character: a split the BPE itself never produces."""
    return [tokenizer(c, add_special_tokens=False)["input_ids"][0] for c in text]


class ScriptedEngine:
    """Returns the next scripted turn of each row, as character tokens, cut at the stop strings like
    the real engines (:func:`cut_at_stop`); records every context it was asked to continue."""

    def __init__(self, tokenizer, turns: Sequence[str]) -> None:
        self.tokenizer, self.turns = tokenizer, list(turns)
        self.policy_version = 3
        self.contexts: list[list[int]] = []
        self.sampled: list[list[int]] = []

    def generate_from_ids(self, prompt_ids, sampling: SamplingConfig, seed=None) -> list[Completion]:
        out = []
        for ids in prompt_ids:
            self.contexts.append(list(ids))
            text = self.turns[len(self.sampled) % len(self.turns)]
            eos = text.endswith("<eos>")
            ids_new = char_ids(self.tokenizer, text.removesuffix("<eos>")) + ([self.tokenizer.eos_token_id] if eos
                                                                              else [])
            ids_new = ids_new[:sampling.max_new_tokens]
            decoded = self.tokenizer.decode(ids_new, skip_special_tokens=True)
            ids_new, decoded, stopped = cut_at_stop(ids_new, decoded, sampling.stop, self.tokenizer)
            reason = "stop" if stopped or (ids_new and ids_new[-1] == self.tokenizer.eos_token_id) else "length"
            self.sampled.append(ids_new)
            out.append(Completion(decoded, ids_new, reason, list(ids), self.policy_version,
                                  [-0.5 - 0.01 * k for k in range(len(ids_new))]))
        return out
