"""Memory accounting: exact byte counts of parameters, gradients and optimiser states."""

import torch

from reasoning_rl.memory import memory_report, tensor_bytes, training_state_bytes


def test_byte_counts_of_a_linear_layer_under_adamw():
    # Linear(10, 4): 40 + 4 = 44 fp32 parameters = 176 bytes; the same for gradients;
    # AdamW keeps exp_avg and exp_avg_sq (176 each) and a 4-byte step per parameter tensor.
    layer = torch.nn.Linear(10, 4)
    opt = torch.optim.AdamW(layer.parameters())
    layer(torch.randn(2, 10)).sum().backward()
    opt.step()
    counted = training_state_bytes([layer], [opt])
    step_bytes = sum(s["step"].numel() * s["step"].element_size() for s in opt.state.values())
    assert counted == {"parameters": 176, "gradients": 176, "optimizer": 2 * 176 + step_bytes}
    report = memory_report([layer], [opt])
    assert report["state_gb"] * 1024 ** 3 == sum(counted.values()) and report["peak_rss_gb"] > 0


def test_shared_tensors_count_once():
    w = torch.zeros(8)
    assert tensor_bytes([w, w]) == 32
    frozen = torch.nn.Linear(3, 3).requires_grad_(False)
    assert training_state_bytes([frozen], []) == {"parameters": 48, "gradients": 0, "optimizer": 0}
