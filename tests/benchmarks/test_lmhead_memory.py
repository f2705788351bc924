"""The LM-head memory benchmark runs every configuration in its own process, and they all compute the
same loss and entropy (chunking and checkpointing change memory, not numbers)."""

import pytest

from benchmarks.perf import lmhead_memory


def test_every_configuration_computes_the_same_loss_in_a_fresh_process(capsys):
    # SmolLM2's vocabulary and width, one layer, a small batch: seconds, not minutes.
    result = lmhead_memory.run(["--layers", "1", "--group", "2", "--prompts", "2", "--prompt-tokens", "6",
                                "--completion-tokens", "5", "--threads", "1", "--allocators", "returned"])
    runs = result.figures["runs"]
    assert set(runs) == {f"{c} (returned)" for c in lmhead_memory.CONFIGS}
    first = next(iter(runs.values()))
    for name, r in runs.items():
        assert r["loss"] == pytest.approx(first["loss"], rel=1e-5), name
        assert r["entropy_mean"] == pytest.approx(first["entropy_mean"], rel=1e-5), name
        assert r["peak_rss_gb"] >= r["peak_before_forward_gb"] > 0
        assert r["lm_head_chunk"] == (682 if "chunk" in name else 0)  # auto: 2^25 // 49,152
        assert r["gradient_checkpointing"] == ("ckpt" in name)
    assert "| chunk+ckpt (returned) | 682 | on |" in capsys.readouterr().out
