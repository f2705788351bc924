"""GRPO training speed on CPU: our trainer on the workload of ``../shared/bench/trl_grpo_cpu.py``.

    reasoning-rl-bench train                               # small model (hidden 128, 4 layers): 1.07M parameters
    reasoning-rl-bench train --hidden 512 --layers 8       # the 34M-parameter workload
    reasoning-rl-bench train --compare trl --rounds 3      # TRL's GRPOTrainer side by side, same machine, same run
    reasoning-rl-bench train --backend hf                  # rollouts with transformers' generate
    reasoning-rl-bench train --model smollm2-135m --compare trl --group 8 --prompts-per-step 2 --max-new 128 \
        --steps 4 --warmup-steps 1 --rounds 2              # SmolLM2-135M on GSM8K prompts, side by side with TRL

``--model smollm2-135m``: the real SmolLM2-135M-Instruct (``model=smollm2-135m``, float32) on GSM8K's
training prompts (``--data-dir``, the task's template and SmolLM2's chat template) with the task's
``math`` verifier as reward, LM head chunked (``model.lm_head_chunk=auto``); the TRL side is
``benchmarks/perf/trl_smollm.py`` (the same folder, prompts, reward and settings). Otherwise the
small random model below.

The run is the real training path: :class:`reasoning_rl.trainer.Trainer` with the GRPO module
(``reasoning_rl/algo/grpo.py``), its rollout engine, log-prob code and reward, on the TRL script's
model, tokenizer, prompts and reward (``benchmarks/perf/workload.py``): G = 8 completions for each
of 4 prompts per step, at most 16 new tokens, temperature 1, beta 0.04, lr 1e-4 (linear decay),
fp32, one update per batch, every group trained on (zero-advantage groups still carry the KL
gradient). The loss settings are TRL 1.16's defaults: token-mean aggregation ("dapo"), group std
with the n-1 denominator and eps 1e-4, the importance-weighted k3 KL, clip 0.2, Adam betas
(0.9, 0.999), gradient clipping at 1.0.

Figures: seconds per step (the median over the steps after ``--warmup-steps``; a step's wall time
runs from its start to the next step's start, logging included, as the TRL script measures it),
generated tokens per second of generation time, each phase's mean seconds per step (generate,
reward, frozen log-probs (pi_ref), policy forward + backward, optimiser, other), peak RSS of the
process, page faults per step (median; first touches of fresh memory, ~3 us each here).
``--compare trl`` runs both as fresh processes, alternating which goes first in each of
``--rounds`` rounds so that machine noise hits both, and prints the ratios per round and their
median. Our trainer sets glibc's allocator to keep freed memory (``trainer.keep_freed_memory``);
``--trl-keep-freed-memory`` gives TRL's process the same settings (``GLIBC_TUNABLES``), to see
how much of the ratio is that setting.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.perf.child import child_env
from benchmarks.perf.results import RESULT_PREFIX, RESULTS_HELP, BenchResult, run_and_record
from reasoning_rl.policy.vllm.availability import MissingExtraError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRL_SCRIPT = REPO_ROOT.parent / "shared" / "bench" / "trl_grpo_cpu.py"
PHASES = ("generate", "reward", "frozen_logprobs", "policy", "optimizer", "other")
"""Our phases; ``frozen_logprobs`` is the reference forward (and pi_old's when mu > 1)."""
TRL_PHASES = ("generate", "ref_logps", "rollout_other", "policy_fwd_loss", "backward", "optimizer", "other")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="reasoning-rl-bench train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=RESULTS_HELP)
    p.add_argument("--hidden", type=int, default=128, help="hidden size (512 with --layers 8: the 34M workload)")
    p.add_argument("--layers", type=int, default=4, help="decoder layers")
    p.add_argument("--heads", type=int, default=None, help="attention heads (default hidden // 32)")
    p.add_argument("--intermediate", type=int, default=None, help="MLP size (default 4 * hidden)")
    p.add_argument("--group", type=int, default=8, help="G: completions per prompt")
    p.add_argument("--prompts-per-step", type=int, default=4, help="distinct prompts per step")
    p.add_argument("--max-new", type=int, default=16, help="most new tokens per completion")
    p.add_argument("--beta", type=float, default=0.04, help="KL coefficient (> 0: a reference model is kept)")
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate (linear decay to 0, as TRL)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--steps", type=int, default=20, help="optimisation steps")
    p.add_argument("--warmup-steps", type=int, default=4, help="steps left out of the median (as the TRL script)")
    p.add_argument("--dataset-size", type=int, default=2000, help="prompts in the data set")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, the data and the sampling")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for both (default: torch's)")
    p.add_argument("--backend", default="native", help="rollout backend: native (our decode loop) or hf (generate)")
    p.add_argument("--micro-batch", type=int, default=32, help="algo.micro_batch_size (rows per forward/backward)")
    p.add_argument("--compare", choices=["trl"], default=None, help="also run TRL's GRPOTrainer, alternating")
    p.add_argument("--rounds", type=int, default=3, help="with --compare: rounds of (ours, TRL) runs")
    p.add_argument("--trl-script", type=Path, default=DEFAULT_TRL_SCRIPT, help="the TRL baseline script")
    p.add_argument("--trl-keep-freed-memory", action="store_true",
                   help="run TRL with our trainer.keep_freed_memory malloc settings too (GLIBC_TUNABLES)")
    p.add_argument("--keep-run", type=Path, default=None, help="write our run folder here instead of a temp dir")
    p.add_argument("--model", choices=["bench", "smollm2-135m"], default="bench",
                   help="bench: the TRL script's random model and arithmetic prompts; smollm2-135m: the real model "
                        "on GSM8K prompts (TRL side: benchmarks/perf/trl_smollm.py)")
    p.add_argument("--data-dir", type=Path, default=REPO_ROOT.parent / "shared" / "data",
                   help="with --model smollm2-135m: the folder holding gsm8k_train.jsonl")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="with --model smollm2-135m: gradient checkpointing in both trainers")
    p.add_argument("--keep-freed-memory", choices=["auto", "true", "false"], default="auto",
                   help="our trainer.keep_freed_memory (reasoning_rl/memory.py): auto, true (every freed block "
                        "kept) or false (blocks of 1 MiB or more handed back to the kernel)")
    args = p.parse_args(argv)
    problems = [f"--{k.replace('_', '-')} must be >= 1, got {getattr(args, k)}"
                for k in ("hidden", "layers", "group", "prompts_per_step", "max_new", "steps", "rounds", "micro_batch")
                if getattr(args, k) < 1]
    if args.warmup_steps < 0 or args.warmup_steps >= args.steps:
        problems.append(f"--warmup-steps must be in [0, --steps), got {args.warmup_steps} with --steps {args.steps}")
    if args.group < 2:
        problems.append(f"--group must be >= 2 (GRPO's group statistics), got {args.group}")
    if args.compare == "trl" and args.model == "bench" and not args.trl_script.exists():
        problems.append(f"--trl-script {args.trl_script} does not exist; pass the path of trl_grpo_cpu.py")
    if args.trl_keep_freed_memory and args.compare != "trl":
        problems.append("--trl-keep-freed-memory applies to TRL's runs: add --compare trl")
    if problems:
        p.error("; ".join(problems))
    return args


def train_config(args: argparse.Namespace, model_dir: Path, definition: Path, run_dir: Path) -> Any:
    """The training config of the workload: the TRL script's settings (module docstring)."""
    from reasoning_rl.algo.advantages import AdvantageConfig
    from reasoning_rl.algo.grpo_config import GRPOConfig
    from reasoning_rl.algo.losses import KLConfig, PolicyLossConfig
    from reasoning_rl.config import TrainConfig

    cfg = TrainConfig(algo=GRPOConfig())
    cfg.model.name_or_path, cfg.model.dtype, cfg.model.device = str(model_dir), "float32", "cpu"
    cfg.task.name = str(definition)
    cfg.algo = GRPOConfig(
        prompts_per_step=args.prompts_per_step, group_size=args.group, kl=KLConfig(beta=args.beta, estimator="k3_is"),
        learning_rate=args.lr, lr_schedule="linear", lr_warmup_steps=0, weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, max_grad_norm=1.0, num_iterations=1,
        policy_loss=PolicyLossConfig(eps_low=0.2, eps_high=0.2), loss_aggregation="token_mean",
        advantage=AdvantageConfig(estimator="grpo", std="unbiased", eps=1e-4), micro_batch_size=args.micro_batch,
    )
    r = cfg.rollout
    r.backend, r.temperature, r.top_p, r.top_k = args.backend, args.temperature, 1.0, 0
    r.max_new_tokens, r.batch_size = args.max_new, args.group * args.prompts_per_step
    r.reward_workers = 0  # in-process, like TRL's reward function (the regex needs no time limit)
    t = cfg.trainer
    t.steps, t.seed, t.output_dir, t.num_threads = args.steps, args.seed, str(run_dir), args.threads
    t.save_every, t.keep_checkpoints, t.log_completions, t.tensorboard, t.progress_bar = 0, 1, False, False, False
    t.keep_freed_memory = {"auto": None, "true": True, "false": False}[args.keep_freed_memory]
    cfg.warmstart.enabled = False
    cfg.evaluation.enabled = False
    return cfg


def _cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, this process's CPU seconds): their deltas' difference
    is CPU time other processes took meanwhile (timings are inflated when it is not ~0)."""
    import resource

    ticks = os.sysconf("SC_CLK_TCK")
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:9]]
        busy = (sum(vals) - vals[3] - vals[4]) / ticks
    except OSError:
        busy = float("nan")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return busy, ru.ru_utime + ru.ru_stime


def smollm_config(args: argparse.Namespace, run_dir: Path) -> Any:
    """``--model smollm2-135m``: the preset composed as reasoning-rl-train composes it, on GSM8K,
    with the workload's GRPO settings (:func:`train_config`'s, less the model and the task)."""
    from benchmarks.perf.plan import compose_train_config

    cfg = compose_train_config(["model=smollm2-135m", "task=gsm8k", f"task.data_dir={args.data_dir}",
                                f"model.gradient_checkpointing={str(args.gradient_checkpointing).lower()}",
                                "model.device=cpu"])
    bench = train_config(args, Path(cfg.model.name_or_path), Path("unused"), run_dir)
    cfg.algo, cfg.rollout, cfg.trainer, cfg.warmstart, cfg.evaluation = (
        bench.algo, bench.rollout, bench.trainer, bench.warmstart, bench.evaluation)
    return cfg


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    """Train ``args.steps`` steps in this process and measure them."""
    from benchmarks.perf.workload import ModelShape, save_model, write_definition
    from reasoning_rl.memory import peak_rss_bytes
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    shape = ModelShape(args.hidden, args.layers, args.heads, args.intermediate, args.seed)
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        work = Path(tmp)
        run_dir = args.keep_run or work / "run"
        if args.model == "smollm2-135m":
            trainer = Trainer(smollm_config(args, run_dir), run_dir)
            params = sum(p.numel() for p in trainer.model.parameters())
        else:
            params = save_model(shape, work / "model")
            definition = write_definition(work, args.dataset_size, args.seed)
            trainer = Trainer(train_config(args, work / "model", definition, run_dir), run_dir)
        starts: list[float] = []
        faults: list[int] = []
        step = trainer.algorithm.step

        def timed_step(i: int) -> Any:
            starts.append(time.perf_counter())
            faults.append(_minor_faults())
            return step(i)

        trainer.algorithm.step = timed_step
        try:
            cpu0 = _cpu_seconds()
            trainer.train()
            cpu1 = _cpu_seconds()
            faults.append(_minor_faults())
        finally:
            trainer.close()
        metrics = read_metrics(Path(run_dir) / "metrics.jsonl")
    ends = [*starts[1:], starts[-1] + metrics[-1]["time/step"]]  # the last step: its own time
    walls = [e - s for s, e in zip(starts, ends)]
    step_faults = [b - a for a, b in itertools.pairwise(faults)]
    return summarise(args, walls, metrics, params, peak_rss_bytes() / 2**20,
                     foreign_cpu=max(0.0, (cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1])), step_faults=step_faults)


def _minor_faults() -> int:
    """Page faults this process has taken so far that needed no disk (first touches of fresh pages)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def summarise(args: argparse.Namespace, walls: list[float], metrics: list[dict[str, Any]], params: int,
              peak_rss_mb: float, foreign_cpu: float, step_faults: list[int]) -> dict[str, Any]:
    """The figures of one run from its per-step wall times and logged metrics."""
    keep = slice(args.warmup_steps, None)
    walls_kept, kept = walls[keep], metrics[keep]
    phases = {k: statistics.fmean(m.get(f"time/{k}", 0.0) for m in kept) for k in PHASES if k != "other"}
    phases["other"] = max(0.0, statistics.fmean(walls_kept) - sum(phases.values()))
    tokens = sum(m["completion/tokens"] for m in kept)
    gen_seconds = sum(m["time/generate"] for m in kept)
    sec_per_step = statistics.median(walls_kept)
    return {
        "sec_per_step": sec_per_step, "steps_per_sec": 1.0 / sec_per_step,
        "sec_per_step_mean": statistics.fmean(walls_kept), "first_step_sec": walls[0],
        "median_over_steps": f"{args.warmup_steps + 1}..{len(walls)}",
        "gen_tokens_per_sec": tokens / gen_seconds if gen_seconds > 0 else float("nan"),
        "completion_tokens_per_step": tokens / len(kept),
        "phase_sec_per_step": phases, "peak_rss_mb": peak_rss_mb, "params": params,
        "reward_mean": statistics.fmean(m["reward/mean"] for m in metrics),
        "kl_mean_last": metrics[-1]["kl/mean"], "foreign_cpu_sec": foreign_cpu,
        "page_faults_per_step": statistics.median(step_faults[keep]),
    }


def print_ours(f: dict[str, Any], label: str = "ours") -> None:
    phases = ", ".join(f"{k} {v * 1000:.1f}" for k, v in f["phase_sec_per_step"].items())
    print(f"[{label}] {f['sec_per_step']:.4f} s/step (median of steps {f['median_over_steps']}), "
          f"{f['gen_tokens_per_sec']:.0f} generated tokens/s, peak RSS {f['peak_rss_mb']:.0f} MB, "
          f"{f['params']:,} parameters, other processes' CPU {f['foreign_cpu_sec']:.1f} s, "
          f"{f['page_faults_per_step']:.0f} page faults/step")
    print(f"[{label}] ms per step: {phases}")


# -- side by side with TRL -------------------------------------------------------------------------

def _last_result_line(stdout: str, what: str) -> str:
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError(f"{what} printed nothing")
    return lines[-1]


def _child(cmd: list[str], what: str, env: dict[str, str] | None = None) -> str:
    env = child_env({**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def ours_in_subprocess(args: argparse.Namespace) -> dict[str, Any]:
    """One run of ours in a fresh process (its own peak RSS), same settings."""
    cmd = [sys.executable, "-m", "benchmarks.perf.train", "--no-results", *_workload_flags(args),
           "--backend", args.backend, "--micro-batch", str(args.micro_batch),
           "--keep-freed-memory", args.keep_freed_memory]
    line = _last_result_line(_child(cmd, "our training run"), "our training run")
    if not line.startswith(RESULT_PREFIX):
        raise RuntimeError(f"our training run ended without its {RESULT_PREFIX} line: {line[:200]}")
    return json.loads(line[len(RESULT_PREFIX):])["figures"]


def _workload_flags(args: argparse.Namespace) -> list[str]:
    flags = ["--hidden", str(args.hidden), "--layers", str(args.layers), "--group", str(args.group),
             "--prompts-per-step", str(args.prompts_per_step), "--max-new", str(args.max_new),
             "--beta", str(args.beta), "--lr", str(args.lr), "--temperature", str(args.temperature),
             "--steps", str(args.steps), "--warmup-steps", str(args.warmup_steps),
             "--dataset-size", str(args.dataset_size), "--seed", str(args.seed)]
    for name in ("heads", "intermediate", "threads"):
        if getattr(args, name) is not None:
            flags += [f"--{name}", str(getattr(args, name))]
    if args.model != "bench":
        flags += ["--model", args.model, "--data-dir", str(args.data_dir)]
        flags += ["--gradient-checkpointing"] if args.gradient_checkpointing else []
    return flags


def _trl_command(args: argparse.Namespace, out: Path) -> list[str]:
    """The TRL side: the shared script on the bench workload, benchmarks/perf/trl_smollm.py on SmolLM2."""
    if args.model == "bench":
        return [sys.executable, str(args.trl_script), *_workload_flags(args), "--quiet", "--json-out", str(out)]
    flags = ["--group", str(args.group), "--prompts-per-step", str(args.prompts_per_step), "--max-new",
             str(args.max_new), "--steps", str(args.steps), "--warmup-steps", str(args.warmup_steps), "--beta",
             str(args.beta), "--lr", str(args.lr), "--temperature", str(args.temperature), "--seed", str(args.seed),
             "--data-dir", str(args.data_dir), "--json-out", str(out)]
    flags += ["--threads", str(args.threads)] if args.threads else []
    flags += ["--gradient-checkpointing"] if args.gradient_checkpointing else []
    return [sys.executable, "-m", "benchmarks.perf.trl_smollm", *flags]


def trl_in_subprocess(args: argparse.Namespace) -> dict[str, Any]:
    """One run of the TRL script in a fresh process, read from its JSON dump."""
    with tempfile.TemporaryDirectory(prefix="bench_trl_") as tmp:
        out = Path(tmp) / "trl.json"
        cmd = _trl_command(args, out)
        extra = {}
        if args.trl_keep_freed_memory:  # the allocator settings our trainer makes in-process
            from reasoning_rl.memory import glibc_tunables

            extra["GLIBC_TUNABLES"] = ":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), glibc_tunables()]))
        _child(cmd, f"the TRL script {args.trl_script}", extra)
        data = json.loads(out.read_text())
    res, phases = data["results"], data["results"]["phase_seconds_measured"]
    measured = max(1, data["results"]["steps_run"] - args.warmup_steps)
    return {
        "sec_per_step": res["sec_per_step_median"], "steps_per_sec": 1.0 / res["sec_per_step_median"],
        "gen_tokens_per_sec": res["gen_tokens_per_sec"], "peak_rss_mb": res["peak_rss_mb"],
        "params": data["model"]["params"],
        "phase_sec_per_step": {k: phases[k] / measured for k in TRL_PHASES if k in phases},
        "foreign_cpu_sec": res["foreign_cpu_seconds_train"], "versions": data["versions"],
        "trl_resolved": data["trl_resolved"],
    }


def compare_trl(args: argparse.Namespace) -> dict[str, Any]:
    if importlib.util.find_spec("trl") is None:  # before any run: one line, not the TRL script's traceback
        raise MissingExtraError("--compare trl needs TRL, which is not installed: pip install trl==1.16.0 "
                                "(the version docs/performance.md's figures were measured with)")
    rounds = []
    for r in range(args.rounds):
        order = ("ours", "trl") if r % 2 == 0 else ("trl", "ours")
        run = {}
        for who in order:
            run[who] = ours_in_subprocess(args) if who == "ours" else trl_in_subprocess(args)
        speedup = run["trl"]["sec_per_step"] / run["ours"]["sec_per_step"]
        rss = run["ours"]["peak_rss_mb"] / run["trl"]["peak_rss_mb"]
        print(f"round {r + 1}/{args.rounds} ({' then '.join(order)}): ours {run['ours']['sec_per_step']:.4f} s/step, "
              f"TRL {run['trl']['sec_per_step']:.4f} s/step -> {speedup:.2f}x steps/s; peak RSS "
              f"{run['ours']['peak_rss_mb']:.0f} vs {run['trl']['peak_rss_mb']:.0f} MB ({rss:.2f}x)", flush=True)
        rounds.append({**run, "speedup": speedup, "rss_ratio": rss})
    out = {
        "speedup_median": statistics.median(x["speedup"] for x in rounds),
        "speedup_min": min(x["speedup"] for x in rounds),
        "rss_ratio_max": max(x["rss_ratio"] for x in rounds),
        "ours_sec_per_step_median": statistics.median(x["ours"]["sec_per_step"] for x in rounds),
        "trl_sec_per_step_median": statistics.median(x["trl"]["sec_per_step"] for x in rounds),
        "rounds": rounds,
    }
    last = rounds[-1]
    print_ours(last["ours"], "ours, last round")
    trl_phases = ", ".join(f"{k} {v * 1000:.1f}" for k, v in last["trl"]["phase_sec_per_step"].items())
    print(f"[TRL, last round] ms per step: {trl_phases}; {last['trl']['gen_tokens_per_sec']:.0f} generated tokens/s")
    print(f"steps/s ours / TRL: median {out['speedup_median']:.2f}x (min {out['speedup_min']:.2f}x) over "
          f"{args.rounds} rounds; peak RSS ours / TRL: at most {out['rss_ratio_max']:.2f}x")
    return out


def run(argv: list[str]) -> BenchResult:
    args = parse_args(argv)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    if args.compare == "trl":
        return BenchResult(0, settings, compare_trl(args))
    figures = run_ours(args)
    print_ours(figures)
    return BenchResult(0, settings, figures)


def main(argv: list[str] | None = None) -> int:
    return run_and_record("train", run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
