"""The training benchmark's workload, built exactly as ``../shared/bench/trl_grpo_cpu.py`` builds it.

Everything is local (no hub access) and matches the TRL script token for token:

* the character tokenizer: ``<pad> <bos> <eos> <unk>``, digits, ``+-*/=()``, letters, space,
  ``.,?!:;'"`` (82 ids), one token per character, ``<bos>`` before every prompt;
* a randomly initialised ``LlamaForCausalLM`` (seed 0, untied embeddings, 256 positions,
  ``rms_norm_eps=1e-6``, fp32), saved with ``save_pretrained`` and loaded back by the trainer;
* the prompts ``"What is 7 * 8? Answer:"`` with ``a, b`` in 0..99 and ``op`` in ``+ - *`` drawn
  by ``random.Random(seed)`` in the TRL script's order, and their gold answers;
* the reward: 1.0 when the first integer of the completion equals the gold answer, else 0.0.

Only benchmark code lives here; the trainer that runs on it is the real one (``reasoning_rl``).
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rewards import register_verifier

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARS = (*string.digits, *"+-*/=()", *string.ascii_letters, " ", *".,?!:;'\"")
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
PROMPT_TEMPLATE = "<bos>{question} Answer:"
"""The TRL script tokenizes ``"What is 7 * 8? Answer:"`` with ``add_special_tokens=True``, which puts
``<bos>`` first; our engines tokenize the rendered prompt as is, so the template writes it."""


@dataclass(frozen=True)
class ModelShape:
    """The benchmark model's shape; the defaults are the issue's small workload."""

    hidden: int = 128
    """Width of the residual stream (``--hidden 512 --layers 8``: the 34M-parameter workload)."""
    layers: int = 4
    """Decoder layers."""
    heads: int | None = None
    """Attention heads (key/value heads the same); None = hidden // 32, as in the TRL script."""
    intermediate: int | None = None
    """MLP width; None = 4 * hidden."""
    seed: int = 0
    """Seed of the random initialisation."""

    @property
    def num_heads(self) -> int:
        return self.heads or max(1, self.hidden // 32)

    @property
    def mlp(self) -> int:
        return self.intermediate or 4 * self.hidden


def build_tokenizer() -> Any:
    """The TRL script's character tokenizer (left padding)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *CHARS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
        padding_side="left", truncation_side="left", clean_up_tokenization_spaces=False, model_max_length=1024,
    )


def save_model(shape: ModelShape, folder: Path) -> int:
    """Build the TRL script's Llama model and tokenizer, save both to ``folder``; returns the parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=shape.hidden, intermediate_size=shape.mlp,
        num_hidden_layers=shape.layers, num_attention_heads=shape.num_heads, num_key_value_heads=shape.num_heads,
        max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(shape.seed)
        model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def trl_arithmetic_rows(num_examples: int, seed: int, split: str) -> list[dict[str, str]]:
    """The TRL script's prompt set: the same ``random.Random(seed)`` draws in the same order."""
    rng = random.Random(seed)
    rows = []
    for i in range(num_examples):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        op = rng.choice(list(OPERATIONS))
        rows.append({"id": f"{split}/{i}", "question": f"What is {a} {op} {b}?", "answer": str(OPERATIONS[op](a, b))})
    return rows


_INT = re.compile(r"-?\d+")


@register_verifier("bench_first_int")
def first_int(completion: str, reference: str, **fields: Any) -> float:
    """1.0 when the first integer in ``completion`` equals ``reference`` (the TRL script's reward)."""
    match = _INT.search(completion)
    return float(match is not None and int(match.group()) == int(reference))


def write_definition(folder: Path, num_examples: int, seed: int) -> Path:
    """A dataset definition (``task.name=<this file>``) for the prompts and reward above."""
    definition = {
        "name": "bench_trl_arithmetic", "version": 1,
        "description": "The prompts and reward of ../shared/bench/trl_grpo_cpu.py (benchmarks/perf/workload.py).",
        "source": {"generator": f"{__name__}:trl_arithmetic_rows",
                   "kwargs": {"num_examples": num_examples, "seed": seed}},
        "splits": {"train": {}}, "train_split": "train", "eval_split": None, "id_field": "id",
        "prompt_template": PROMPT_TEMPLATE, "answer_field": "answer", "verifier": {"name": "bench_first_int"},
    }
    path = folder / "bench_trl_arithmetic.yaml"
    path.write_text(yaml.safe_dump(definition, sort_keys=False), encoding="utf-8")
    return path
