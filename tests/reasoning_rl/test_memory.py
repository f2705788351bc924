"""Memory accounting: exact byte counts of parameters, gradients and optimiser states."""

import subprocess
import sys

import pytest
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


_REUSE = """
import resource, sys, torch
from reasoning_rl.memory import keep_freed_memory
assert keep_freed_memory() is True
def touch():  # a step's worth of activations, 0.25 to 8 MiB: allocated, written, freed
    xs = [torch.ones(n, 1024) for n in (64, 128, 256, 512, 1024, 2048)]
    del xs
for _ in range(5):
    touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    touch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_memory_is_reused_without_page_faults():
    # 20 rounds of 15.75 MiB would be 80,640 first touches if each came fresh from the kernel;
    # with glibc's defaults this pattern took 0 to 6,112 (it depends on the heap's state),
    # with freed memory kept it takes none. A fresh process: the setting is process-wide.
    out = subprocess.run([sys.executable, "-c", _REUSE], capture_output=True, text=True, check=True)
    assert int(out.stdout.strip()) < 500
