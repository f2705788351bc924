"""Loading a saved model: every tensor comes back 64-byte aligned, equal to what was saved, with
tied weights still one tensor (so a resumed run computes the same bits as an uninterrupted one).
Switching modes only when the mode changes."""

import torch

from reasoning_rl.policy.loading import (
    ALIGNMENT_BYTES,
    align_tensors,
    build_tiny_model,
    load_pretrained,
    set_training,
)
from reasoning_rl.settings.model import TinyModelConfig


def test_a_loaded_model_is_aligned_equal_and_still_tied(tmp_path):
    model, tok = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    model.config.tie_word_embeddings = True
    model.tie_weights()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, _ = load_pretrained(str(tmp_path))
    assert all(t.data_ptr() % ALIGNMENT_BYTES == 0 for t in [*loaded.parameters(), *loaded.buffers()])
    saved = model.state_dict()
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, saved[name]), name
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert align_tensors(loaded) == 0  # nothing left to copy


def test_misaligned_tensors_are_copied_and_keep_their_values():
    model, _ = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    weight = model.model.norm.weight
    buffer = torch.zeros(weight.numel() + 1)
    buffer[1:] = weight.detach()
    weight.data = buffer[1:]  # 4 bytes past an aligned start
    assert weight.data_ptr() % ALIGNMENT_BYTES
    assert align_tensors(model) == 1
    assert weight.data_ptr() % ALIGNMENT_BYTES == 0 and torch.equal(weight.detach(), buffer[1:])
    assert model.model.norm.weight is weight


def test_set_training_switches_only_when_the_mode_changes():
    model, _ = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    calls = []
    original = model.train
    model.train = lambda mode=True: calls.append(mode) or original(mode)
    model.training = True
    set_training(model, True)
    assert calls == []
    set_training(model, False)
    set_training(model, False)
    assert calls == [False] and not model.training and not model.model.layers[0].training
