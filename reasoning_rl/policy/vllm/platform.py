"""Starting a vLLM engine in the trainer's process: what the platform offers, the engine's
options, process state kept, calls with a deadline (reasoning_rl.policy.vllm)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from reasoning_rl.config_checks import ConfigError
from reasoning_rl.policy.vllm.availability import require_vllm

log = logging.getLogger(__name__)
T = TypeVar("T")

CPU_MIN_BATCHED_TOKENS = 2048
"""vLLM's default token budget of a scheduler step; on the CPU it is raised to the longest sequence so
that a prompt always fits one step (chunked prefill off, :func:`engine_options`)."""
CPU_KV_CACHE_GIB = 1
"""KV cache of a CPU engine, in GiB, unless ``VLLM_CPU_KVCACHE_SPACE`` (vLLM's own setting) says
otherwise. Without either, vLLM's CPU build reserves ``gpu_memory_utilization`` of the machine's
memory (0.3-0.9 of it) for the engine."""


# -- a call with a deadline --------------------------------------------------------------------------

def call_with_timeout(fn: Callable[[], T], timeout_s: float, what: str, setting: str) -> T:
    """``fn()`` in a daemon thread; its result, or its exception re-raised here, or a
    ``TimeoutError`` naming ``setting`` when it has not returned after ``timeout_s`` seconds.

    A thread cannot be killed: after a timeout it may still be running, so the caller must stop
    (the engine is in an unknown state), which the error says. A daemon thread does not keep the
    process alive at exit."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"reasoning-rl {what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not finish within {timeout_s:g} s ({setting}); the engine is in an "
                           f"unknown state, so the run stops. Raise {setting} for a large model, or check "
                           "that the device is not stuck or out of memory")
    if "error" in box:
        raise box["error"]
    return box["value"]


# -- starting the engine -----------------------------------------------------------------------------

@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """Undo what starting a vLLM engine in this process does to process-wide state: the torch
    thread count and ``torch.set_num_threads`` itself (vLLM's CPU worker replaces it with a function
    that only logs a warning), and the Python, NumPy and torch random generators (vLLM seeds them
    all with its ``seed``)."""
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    py_rng, np_rng, torch_rng = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads  # type: ignore[assignment]
        set_num_threads(threads)
        random.setstate(py_rng)
        np.random.set_state(np_rng)
        torch.set_rng_state(torch_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


@dataclasses.dataclass(frozen=True)
class Platform:
    """What the engine's platform offers, as vLLM reports it (``vllm.platforms.current_platform``)."""

    device: str
    """``cuda``, ``cpu``, ..."""
    sleep_mode: bool
    """Whether ``LLM.sleep`` / ``wake_up`` work there (not on the CPU)."""


def current_platform() -> Platform:
    from vllm.platforms import current_platform as vllm_platform

    return Platform(device=vllm_platform.device_type, sleep_mode=bool(vllm_platform.is_sleep_mode_available()))


def resolve_sleep_mode(setting: bool | None, platform: Platform) -> tuple[bool, str]:
    """``rollout.vllm_sleep_mode`` on ``platform``: (on, why). null = where vLLM has it; true where
    it has not is a ConfigError (the engine would hold its memory through every update)."""
    if setting is None:
        why = "rollout.vllm_sleep_mode=null: on, vLLM has it on" if platform.sleep_mode else (
            "rollout.vllm_sleep_mode=null: off, vLLM has no sleep mode on")
        return platform.sleep_mode, f"{why} {platform.device}"
    if setting and not platform.sleep_mode:
        raise ConfigError(f"rollout.vllm_sleep_mode=true, but vLLM has no sleep mode on {platform.device}: "
                          "set rollout.vllm_sleep_mode=null (chosen by platform) or false")
    return setting, f"rollout.vllm_sleep_mode={str(setting).lower()}"


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``float32``, the name vLLM's ``dtype`` takes."""
    return str(dtype).removeprefix("torch.")


def engine_options(folder: str | Path, *, dtype: str, seed: int | None, platform: Platform,
                   max_model_len: int | None, model_max_len: int, **extra: Any) -> dict[str, Any]:
    """Keywords for ``vllm.LLM`` on ``platform``: the model folder, dtype and seed, ``extra``
    (``gpu_memory_utilization``, ``enable_sleep_mode``, ``tensor_parallel_size``...) as given.

    On the CPU, chunked prefill is off and a scheduler step's token budget is at least the longest
    sequence (``max_model_len``, else ``model_max_len``): vLLM's CPU build fails a seeded request
    whose prompt is split over steps (``RuntimeError: CPU Generator does not use offset``), and
    every request here is seeded. The KV cache there is :data:`CPU_KV_CACHE_GIB` unless
    ``VLLM_CPU_KVCACHE_SPACE`` is set (vLLM reads it itself).

    Prefix caching is left to vLLM, which turns it on where the platform has it (vLLM 0.32: CUDA and
    the x86 CPU build): a multi-turn episode's next turn then reads its context's whole cache blocks
    back instead of recomputing them; :func:`prefix_caching` says what a started engine runs with."""
    options: dict[str, Any] = dict(model=str(folder), dtype=dtype, seed=seed, **extra)
    if max_model_len:
        options["max_model_len"] = max_model_len
    if platform.device == "cpu":
        options["enable_chunked_prefill"] = False
        options["max_num_batched_tokens"] = max(CPU_MIN_BATCHED_TOKENS, max_model_len or model_max_len)
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            options["kv_cache_memory_bytes"] = CPU_KV_CACHE_GIB * 2**30
    return options


def prefix_caching(llm: Any) -> dict[str, Any]:
    """What a started engine's prefix cache runs with: ``prefix_caching`` (on/off, as vLLM settled
    it) and ``block_size`` (tokens per cache block: only whole blocks are reused; 128 on the CPU
    build); None where this vLLM does not say."""
    cache = getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "cache_config", None)
    return {"prefix_caching": getattr(cache, "enable_prefix_caching", None),
            "block_size": getattr(cache, "block_size", None)}


def start_llm(options: Mapping[str, Any]) -> Any:
    """``vllm.LLM(**options)`` with its engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
    set here unless already set: the weight sync hands tensors over instead of pickling them) and the
    process-wide state restored after (:func:`process_state_kept`)."""
    require_vllm("backend=vllm")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs

    accepted = {f.name for f in dataclasses.fields(EngineArgs)}
    options = dict(options)
    if "logprobs_mode" in accepted:  # log-probs after temperature / top-k / top-p, as the trainer's
        options.setdefault("logprobs_mode", "processed_logprobs")
    with process_state_kept():
        return LLM(**options)
