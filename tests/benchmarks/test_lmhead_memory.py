"""The LM-head memory benchmark runs every configuration in its own process, and they all compute the
same loss and entropy (chunking and checkpointing change memory, not numbers)."""

import math

import pytest
import torch

from benchmarks.perf import lmhead_memory
from tests.conftest import assert_close_up_to_rounding


@pytest.mark.numerics
def test_every_configuration_computes_the_same_loss_in_a_fresh_process(capsys):
    # SmolLM2's vocabulary and width, one layer, a small batch: seconds, not minutes.
    result = lmhead_memory.run(["--layers", "1", "--group", "2", "--prompts", "2", "--prompt-tokens", "6",
                                "--completion-tokens", "5", "--threads", "1", "--allocators", "returned"])
    runs = result.figures["runs"]
    assert set(runs) == {f"{c} (returned)" for c in lmhead_memory.CONFIGS}
    first = next(iter(runs.values()))
    # The same sums, chunked or checkpointed (tests/conftest.py's rule): one layer of SmolLM2's widths over
    # 11 positions, then its LM head and the softmax over the vocabulary; loss and entropy are means of
    # log-prob-sized terms (about log V).
    c = lmhead_memory.SMOLLM2_135M
    terms = 3 * c["hidden_size"] + c["intermediate_size"] + 11 + c["hidden_size"] + c["vocab_size"]
    for name, r in runs.items():
        for key in ("loss", "entropy_mean"):
            assert_close_up_to_rounding(r[key], first[key], terms=terms, dtype=torch.float32,
                                        scale=max(abs(first[key]), math.log(c["vocab_size"])), msg=f"{name} {key}")
        assert r["peak_rss_gb"] >= r["peak_before_forward_gb"] > 0
        assert r["lm_head_chunk"] == (682 if "chunk" in name else 0)  # auto: 2^25 // 49,152
        assert r["gradient_checkpointing"] == ("ckpt" in name)
    assert "| chunk+ckpt (returned) | 682 | on |" in capsys.readouterr().out
