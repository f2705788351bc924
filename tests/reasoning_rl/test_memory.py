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


_LIBC = """
import ctypes, sys

class MallInfo2(ctypes.Structure):  # glibc >= 2.33
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                     "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
"""
"""glibc's malloc, free and mallinfo2 through ctypes, for the probes below (run in fresh processes)."""

_PROBE = _LIBC + """
if sys.argv[1] == "keep":
    from reasoning_rl.memory import keep_freed_memory
    assert keep_freed_memory() is True
before = libc.mallinfo2()
block = libc.malloc(24 << 20)  # 24 MiB
ctypes.memset(block, 1, 24 << 20)
during = libc.mallinfo2()
libc.free(block)
after = libc.mallinfo2()
print(during.hblks - before.hblks, during.arena - after.arena)
"""


def _probe(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    mapped, returned = out.stdout.split()
    return int(mapped), int(returned)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_memory_comes_from_the_heap_and_stays_there_after_free():
    # A 24 MiB block: glibc's defaults give it its own mmap (returned to the kernel by free);
    # with freed memory kept it comes from the heap, and freeing it gives nothing back.
    # Fresh processes: the setting is process-wide.
    try:
        default = _probe("default")
    except subprocess.CalledProcessError as exc:
        if "mallinfo2" in exc.stderr:
            pytest.skip("this C library has no mallinfo2 (glibc < 2.33)")
        raise
    assert default[0] == 1  # mapped apart
    assert _probe("keep") == (0, 0)  # from the heap; the heap did not shrink


_REPEAT_PROBE = _LIBC + """
if sys.argv[1] == "return":
    from reasoning_rl.memory import RETURN_LARGE_BLOCKS, set_allocator
    assert set_allocator(RETURN_LARGE_BLOCKS) is True
libc.free(libc.malloc(4 << 20))  # a 4 MiB block freed: glibc's defaults then raise the mmap threshold past it
before = libc.mallinfo2()
block = libc.malloc(4 << 20)
print(libc.mallinfo2().hblks - before.hblks)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_blocks_returned_stay_mapped_apart_after_the_first_free():
    # glibc's default threshold adapts: after a 4 MiB block is freed, the next one comes from the heap
    # (where its hole stays resident). With large blocks returned it is mapped apart again.
    def run(mode):
        out = subprocess.run([sys.executable, "-c", _REPEAT_PROBE, mode], capture_output=True, text=True)
        if out.returncode and "mallinfo2" in out.stderr:
            pytest.skip("this C library has no mallinfo2 (glibc < 2.33)")
        assert out.returncode == 0, out.stderr
        return int(out.stdout)
    assert run("default") == 0
    assert run("return") == 1


def test_allocator_choice_auto_returns_large_blocks_only_for_a_large_cpu_model_with_checkpointing():
    from reasoning_rl.memory import KEPT_MEMORY, RETURN_LARGE_BLOCKS, allocator_choice

    assert allocator_choice(None, 1_000_000, on_cpu=True) == ("kept", KEPT_MEMORY)  # the tiny model
    assert allocator_choice(None, 1_000_000, on_cpu=True, checkpointing=True)[0] == "kept"
    assert allocator_choice(None, 134_515_008, on_cpu=True) == ("kept", KEPT_MEMORY)  # SmolLM2: no page faults
    assert allocator_choice(None, 134_515_008, on_cpu=True, checkpointing=True) == (
        "large blocks returned", RETURN_LARGE_BLOCKS)  # SmolLM2 with checkpointing: half the peak
    assert allocator_choice(None, 134_515_008, on_cpu=False, checkpointing=True)[0] == "kept"  # a GPU's tensors
    assert allocator_choice(True, 134_515_008, on_cpu=True)[0] == "kept"
    assert allocator_choice(False, 1_000_000, on_cpu=True)[0] == "large blocks returned"
    assert RETURN_LARGE_BLOCKS["mmap_threshold"] == 2**20 < KEPT_MEMORY["mmap_threshold"]
