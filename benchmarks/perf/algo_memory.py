"""Training memory of GRPO against PPO with a critic, measured side by side in one invocation.

    reasoning-rl-bench memory                          # ~100M-parameter model: grpo, ppo, ppo value_head
    reasoning-rl-bench memory --size tiny --steps 3    # the built-in tiny model
    python -m benchmarks.perf.algo_memory --algos grpo ppo --completions 16

DeepSeekMath (arXiv 2402.03300, sec. 4.1) drops PPO's value model, "typically another model of
comparable size as the policy model", to save memory. This benchmark checks the claim with the
real training code: every algorithm runs ``reasoning_rl.trainer.Trainer`` for a few steps in a
fresh Python process (so one run's peak cannot hide in another's), from the same randomly
initialised model, on the same task, with the same number of completions per step (GRPO:
completions / G prompts x G samples; PPO: completions prompts x 1 sample), the same generation
length and micro-batch. Per run it prints:

- ``state``: parameters of every model held (policy, reference, critic), their gradients and the
  optimisers' states, counted in bytes (``reasoning_rl.memory.training_state_bytes``);
- ``peak RSS``: the process's peak resident memory, and the same above the process's resident
  memory just before the trainer was built (imports, interpreter: the same in every run);
- on a GPU, ``torch.cuda.max_memory_allocated`` (parameters, gradients, optimiser states and
  activations as the allocator saw them);
- seconds per step (median of the steps after the first).

Then the ratios of every run to the first PPO run. The last line is machine-readable:
``algo_memory size=... <algo>_state_gb=... <algo>_peak_rss_gb=... <algo>_vs_ppo_state=...``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.perf.child import child_env
from benchmarks.perf.results import BenchResult, run_and_record

# Model shapes (reasoning_rl.policy.loading.TinyModelConfig, Llama-style, character vocabulary).
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "intermediate_size": 512},
    # 12 x (4 x 768^2 attention + 3 x 768 x 2560 MLP) = 99M parameters (+ embeddings)
    "100m": {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 2560},
}

# What each name runs: Hydra overrides on top of the common ones below.
ALGORITHMS: dict[str, list[str]] = {
    "grpo": ["algo=grpo"],
    "ppo": ["algo=ppo", "algo.critic=separate"],
    "ppo_value_head": ["algo=ppo", "algo.critic=value_head"],
}


def overrides_for(algo: str, size: dict[str, int], completions: int, group_size: int, steps: int,
                  max_new_tokens: int, device: str, threads: int) -> list[str]:
    """Hydra overrides of one run: equal completions per step, no warm start, no evaluation."""
    if algo not in ALGORITHMS:
        raise SystemExit(f"unknown algorithm {algo!r} for the memory benchmark; choose from {', '.join(ALGORITHMS)}")
    groups = algo == "grpo"
    if groups and completions % group_size:
        raise SystemExit(f"--completions {completions} is not a multiple of --group-size {group_size}")
    batch = [f"algo.prompts_per_step={completions // group_size if groups else completions}",
             f"algo.group_size={group_size if groups else 1}", f"algo.micro_batch_size={completions}"]
    model = [f"model.tiny.{k}={v}" for k, v in size.items()] + [f"model.device={device}"]
    return [*ALGORITHMS[algo], *batch, *model, "warmstart.enabled=false", "evaluation.enabled=false",
            f"trainer.steps={steps}", "trainer.save_every=0", "trainer.progress_bar=false",
            "trainer.tensorboard=false", "trainer.log_completions=false", f"trainer.num_threads={threads}",
            f"rollout.max_new_tokens={max_new_tokens}", "rollout.stop=[]", "algo.kl.beta=0.04"]


def worker(overrides: list[str], run_dir: str) -> dict[str, Any]:
    """One run in this process: build the trainer, train, report its memory and step times."""
    from hydra import compose, initialize_config_module

    from reasoning_rl.cli import to_train_config
    from reasoning_rl.memory import peak_rss_bytes
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = to_train_config(compose(config_name="train", overrides=overrides))
    baseline = peak_rss_bytes()
    trainer = Trainer(cfg, run_dir)
    try:
        summary = trainer.train()
        params = sum(p.numel() for p in trainer.model.parameters())
    finally:
        trainer.close()
    times = [m["time/step"] for m in read_metrics(Path(run_dir) / "metrics.jsonl")]
    gb = 1024 ** 3
    memory = summary["memory"]
    return {**memory, "baseline_rss_gb": baseline / gb, "rss_above_baseline_gb": memory["peak_rss_gb"] - baseline / gb,
            "s_per_step": statistics.median(times[1:] or times), "policy_params": params,
            "label": summary["label"]}


def run_one(algo: str, overrides: list[str]) -> dict[str, Any]:
    """``worker`` in a fresh interpreter; its last stdout line is the JSON result."""
    with tempfile.TemporaryDirectory(prefix=f"algo_memory_{algo}_") as tmp:
        cmd = [sys.executable, "-m", "benchmarks.perf.algo_memory", "--worker", json.dumps(overrides),
               "--run-dir", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    if proc.returncode != 0:
        raise SystemExit(f"the {algo} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


COLUMNS = [("parameters_gb", "params"), ("gradients_gb", "grads"), ("optimizer_gb", "optim"),
           ("state_gb", "state"), ("peak_rss_gb", "peak RSS"), ("rss_above_baseline_gb", "RSS - base"),
           ("cuda_max_allocated_gb", "CUDA max")]


def format_table(results: dict[str, dict[str, Any]], reference: str | None) -> str:
    """Figures in GB, seconds per step, and the ratios to ``reference`` (the first PPO run)."""
    cols = [(k, name) for k, name in COLUMNS if any(k in r for r in results.values())]
    head = ["run", *(name for _, name in cols), "s/step"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for algo, r in results.items():
        cells = [f"{r[k]:.3f}" if k in r else "-" for k, _ in cols]
        lines.append(f"| {algo} | " + " | ".join(cells) + f" | {r['s_per_step']:.2f} |")
    if reference is not None:
        base = results[reference]
        for algo, r in results.items():
            if algo == reference:
                continue
            ratios = ", ".join(f"{name} {r[k] / base[k]:.2f}" for k, name in cols
                               if k in r and k in base and base[k] > 0 and k not in ("gradients_gb",))
            lines.append(f"\n{algo} / {reference}: {ratios}")
    return "\n".join(lines)


def run(argv: list[str]) -> BenchResult:
    p = argparse.ArgumentParser(prog="reasoning-rl-bench memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="100m", help="model shape (default 100m)")
    p.add_argument("--algos", nargs="+", default=["grpo", "ppo", "ppo_value_head"], choices=sorted(ALGORITHMS))
    p.add_argument("--completions", type=int, default=16, help="completions per step, for every algorithm")
    p.add_argument("--group-size", type=int, default=8, help="GRPO's G (its prompts = completions / G)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per run (0 = torch's default)")
    args = p.parse_args(argv)
    settings = vars(args)
    results: dict[str, dict[str, Any]] = {}
    for algo in args.algos:
        ovr = overrides_for(algo, SIZES[args.size], args.completions, args.group_size, args.steps,
                            args.max_new_tokens, args.device, args.threads)
        print(f"[{algo}] {' '.join(ovr)}", flush=True)
        results[algo] = run_one(algo, ovr)
    params = next(iter(results.values()))["policy_params"]
    print(f"\npolicy {params / 1e6:.1f}M parameters; {args.completions} completions/step of at most "
          f"{args.max_new_tokens} tokens; {args.steps} steps each, fresh process each\n")
    reference = "ppo" if "ppo" in results else None
    print(format_table(results, reference))
    fields = [f"size={args.size}", f"params={params}"]
    for algo, r in results.items():
        fields += [f"{algo}_state_gb={r['state_gb']:.4f}", f"{algo}_peak_rss_gb={r['peak_rss_gb']:.4f}",
                   f"{algo}_s_per_step={r['s_per_step']:.3f}"]
        if reference and algo != reference:
            fields.append(f"{algo}_vs_{reference}_state={r['state_gb'] / results[reference]['state_gb']:.3f}")
            fields.append(f"{algo}_vs_{reference}_rss_above_base="
                          f"{r['rss_above_baseline_gb'] / results[reference]['rss_above_baseline_gb']:.3f}")
    print("algo_memory " + " ".join(fields))
    figures = {"params": params, "runs": results, "reference": reference}
    return BenchResult(0, settings, figures)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--worker" in argv:  # one run, in the fresh interpreter ``run_one`` started
        i = argv.index("--worker")
        print(json.dumps(worker(json.loads(argv[i + 1]), argv[argv.index("--run-dir") + 1])))
        return 0
    return run_and_record("memory", run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
