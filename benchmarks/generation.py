"""Generation backends for evaluation: the toolkit's HF rollout engine, or vLLM when asked for.

Both expose ``generate(prompts, n, sampling, seed) -> list[list[Completion]]``
(the :class:`reasoning_rl.rollout.RolloutEngine` protocol), so the evaluation
loop does not know which one runs. vLLM is imported only when ``backend=vllm``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from reasoning_rl.rollout import Completion, SamplingConfig, VLLMEngine, require_vllm


def sampling_config(temperature: float, top_p: float, top_k: int, max_new_tokens: int,
                    stop: Sequence[str] = ()) -> SamplingConfig:
    """The toolkit's sampling settings; ``temperature=0`` means greedy decoding."""
    greedy = temperature <= 0
    return SamplingConfig(temperature=1.0 if greedy else temperature, top_p=top_p, top_k=top_k,
                          max_new_tokens=max_new_tokens, do_sample=not greedy, stop=list(stop))


class LazyEngine:
    """Builds the real engine on the first ``generate`` call, so a fully cached re-run
    (or a sweep where only the newest checkpoint is new) loads no model weights."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self.engine: Any = None

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingConfig,
                 seed: int | None = None) -> list[list[Completion]]:
        if self.engine is None:
            self.engine = self._build()
        return self.engine.generate(prompts, n, sampling, seed=seed)


def load_tokenizer(model: str) -> Any:
    """The model's tokenizer alone (for prompts and the chat template); cheap next to the weights."""
    from reasoning_rl.models import load_tokenizer as load

    return load(model)


def resolve_backend(backend: str, device: str = "auto") -> str:
    """``auto`` -> ``vllm`` when the vllm extra is installed and generation runs on a CUDA GPU, else ``hf``."""
    if backend != "auto":
        return backend
    import torch

    from reasoning_rl.rollout import vllm_available

    on_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return "vllm" if on_cuda and vllm_available() else "hf"


def load_engine(backend: str, model: str, device: str = "auto", dtype: str = "float32",
                batch_size: int = 16, seed: int = 0) -> tuple[LazyEngine, Any]:
    """``(engine, tokenizer)`` for ``model`` (checkpoint folder or hub name) on ``backend``
    (``auto``: :func:`resolve_backend`).

    The engine loads the weights when it is first asked to generate.
    """
    backend = resolve_backend(backend, device)
    if backend == "hf":
        def build() -> Any:
            from reasoning_rl.models import load_pretrained, resolve_device
            from reasoning_rl.rollout import HFEngine

            model_obj, tokenizer = load_pretrained(model, device=str(resolve_device(device)), dtype=dtype)
            return HFEngine(model_obj, tokenizer, batch_size=batch_size)
    elif backend == "vllm":
        def build() -> Any:
            return VLLMEngine(model, dtype="auto" if dtype == "float32" else dtype, seed=seed)

        require_vllm("backend=vllm")  # fail now, not after the cache check
    else:
        raise ValueError(f"unknown generation backend {backend!r}; expected 'auto', 'hf' or 'vllm'")
    return LazyEngine(build), load_tokenizer(model)
