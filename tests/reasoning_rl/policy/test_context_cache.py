"""LeanDecoder.extend continues rows from keys and values kept from an earlier call
(reasoning_rl.policy.lean.context_cache): every logit equals the model's full forward over the
row's whole sequence, with grouped-query attention, prompts shared in the first call, ragged
appends (a hole between the cached block and the new one) and a row with nothing cached."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from reasoning_rl.policy.lean import LeanDecoder
from reasoning_rl.policy.lean.context_cache import CachedContext, ContextCache
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.settings.model import TinyModelConfig
from tests.conftest import assert_close_up_to_rounding, decoder_terms

pytestmark = pytest.mark.numerics
POSITIONS = 64  # every context here: under 64 tokens


def _model(arch: str, kv_heads: int):
    tok = build_tiny_model(TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32))[1]
    shape = dict(vocab_size=len(tok), hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                 num_key_value_heads=kv_heads, intermediate_size=96, max_position_embeddings=128)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**shape)) if arch == "llama" else Qwen2ForCausalLM(Qwen2Config(**shape))
    return model.eval(), tok


def _left_pad(rows):
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def _full_logits(model, seq):
    """The module forward over one unpadded sequence: logits ``[len, V]``."""
    return model(input_ids=torch.tensor([seq])).logits[0]


@pytest.mark.parametrize("arch,kv_heads", [("llama", 2), ("qwen2", 1), ("llama", 6)])
def test_extend_gives_the_full_forward_of_each_rows_whole_sequence(arch, kv_heads):
    model, tok = _model(arch, kv_heads)
    enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [enc("What is 3 + 4? Answer: ")] * 2 + [enc("1+2=")] * 2  # two groups of G = 2
    with torch.inference_mode():
        first = LeanDecoder(model)
        logits = first.prefill(*_left_pad(prompts), 4)
        drawn = []
        for _ in range(3):  # three steps: tokens 0..2 of each row are run, token 3 only drawn
            drawn.append(logits.argmax(-1))
            logits = first.step(drawn[-1])
        drawn = torch.stack(drawn, 1).tolist()  # [4, 3]
        kept = [3, 1, 0, 2]  # run tokens kept per row (turns cut at different places)
        past = [first.context_kv(i, k) for i, k in enumerate(kept)]
        seqs = [p + d[:k] for p, d, k in zip(prompts, drawn, kept)]
        assert [kv.shape[3] for kv in past] == list(map(len, seqs))
        with pytest.raises(ValueError, match="4 new tokens asked for, 3 were run"):
            first.context_kv(0, 4)

        # Appends of 1, 4, 2 and 3 tokens, and a fifth row with nothing cached.
        appended = [[5], [7, 8, 9, 10], [11, 12], [13, 14, 15]]
        rows = [*(s + a for s, a in zip(seqs, appended)), enc("12*3 is")]
        new = [*appended, rows[4]]
        second = LeanDecoder(model)
        steps = [second.extend([*past, None], *_left_pad(new), 3)]
        chosen = []
        for _ in range(2):
            chosen.append(steps[-1].argmax(-1))
            steps.append(second.step(chosen[-1]))
        lean = torch.stack(steps, 1)  # [5, 3, V]
        chosen = torch.stack(chosen, 1).tolist()  # [5, 2]
        for i, row in enumerate(rows):
            full = _full_logits(model, row + chosen[i])[len(row) - 1:]  # [3, V]
            assert_close_up_to_rounding(lean[i], full, terms=decoder_terms(model.config, POSITIONS))
        # What the next call would take: the whole context and the run tokens, in order.
        again = second.context_kv(1, 1)
        assert again.shape[3] == len(rows[1]) + 1
        full_kv = LeanDecoder(model)
        full_kv.prefill(*_left_pad([rows[1] + chosen[1][:1]]), 1)
        assert_close_up_to_rounding(again, full_kv.context_kv(0, 0), terms=decoder_terms(model.config, POSITIONS))


def test_an_entry_is_used_only_for_a_context_it_is_a_proper_prefix_of():
    cache = ContextCache()
    cache.replace({"a": CachedContext([1, 2, 3], torch.zeros(1, 2, 1, 3, 4), policy_version=2)})
    assert cache.usable("a", [1, 2, 3, 9], 2) is cache.rows["a"]
    assert cache.usable("a", [1, 2, 3], 2) is None  # nothing new to run: no logits to read
    assert cache.usable("a", [1, 5, 3, 9], 2) is None  # another context under the key
    assert cache.usable("a", [1, 2, 3, 9], 3) is None  # other weights
    assert cache.usable("b", [1, 2, 3, 9], 2) is None
    assert cache.nbytes == 1 * 2 * 1 * 3 * 4 * 4
