"""TRL 1.16's GRPOTrainer on SmolLM2-135M-Instruct with GSM8K prompts: the baseline of
``reasoning-rl-bench train --model smollm2-135m --compare trl`` (benchmarks/perf/train.py).

    python -m benchmarks.perf.trl_smollm --group 8 --prompts-per-step 2 --max-new 128 --steps 4 --json-out t.json

What it shares with our side, so that the two runs differ only in the trainer:

* the model: the folder ``model=smollm2-135m`` converts its GGUF file into (float32, tied embeddings),
  loaded by TRL from that path (its reference model is loaded from it too, beta > 0);
* the prompts: GSM8K's train split from ``--data-dir``, rendered by our task (its prompt template
  and SmolLM2's chat template, ``reasoning_rl.tasks.Task``), handed to TRL as plain text;
* the reward: our ``math`` verifier on the GSM8K reference (the task's own reward), in-process;
* G, prompts per step, completion length, beta, temperature, learning rate, fp32 (TRL's bf16
  autocast and gradient checkpointing, on by default, are turned off), one update per batch.

Printed/written: the median seconds per step after ``--warmup-steps``, peak RSS of the process
(``ru_maxrss``), generated tokens per second; the JSON has the fields benchmarks/perf/train.py reads
from the shared TRL script's dump (``results``, ``model``, ``versions``, ``trl_resolved``).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import argparse
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--max-new", type=int, default=128)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup-steps", type=int, default=1)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--gradient-checkpointing", action="store_true", help="TRL's gradient checkpointing on")
    return p.parse_args(argv)


def smollm_folder_and_prompts(data_dir: Path, count: int, seed: int) -> tuple[Path, list[dict[str, str]]]:
    """The converted SmolLM2 folder (converted now if needed) and ``count`` GSM8K training prompts
    rendered by our task, shuffled by ``seed``."""
    from benchmarks.perf.plan import compose_train_config
    from reasoning_rl.policy.gguf_cache import converted_folder
    from reasoning_rl.policy.loading import load_tokenizer
    from reasoning_rl.tasks import Task

    cfg = compose_train_config(["model=smollm2-135m", "task=gsm8k", f"task.data_dir={data_dir}"])
    folder = Path(converted_folder(cfg.model.name_or_path, cfg.model.gguf))
    tokenizer = load_tokenizer(str(folder))
    task = Task(cfg.task)
    examples = task.examples(task.train_split, tokenizer)
    random.Random(seed).shuffle(examples)
    return folder, [{"prompt": e.prompt, "answer": str(e.reference)} for e in examples[:count]]


def math_reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """Our ``math`` verifier (the GSM8K task's reward): 1.0 when the boxed / final answer equals the reference."""
    from rewards import get_verifier

    verify = get_verifier("math")
    scores = []
    for completion, reference in zip(completions, answer):
        result = verify(completion, reference)
        scores.append(float(result.score or 0.0))
    return scores


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    import datasets
    import torch
    import transformers
    import trl
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from reasoning_rl.memory import peak_rss_bytes

    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    per_step = args.group * args.prompts_per_step
    folder, rows = smollm_folder_and_prompts(args.data_dir, max(64, args.steps * args.prompts_per_step * 2),
                                             args.seed)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    # TRL defaults gradient checkpointing on; transformers >= 5.2x names it activation_checkpointing.
    ckpt_off = {"gradient_checkpointing": args.gradient_checkpointing}
    if "activation_checkpointing" in {f.name for f in dataclasses.fields(GRPOConfig)}:
        ckpt_off["activation_checkpointing"] = args.gradient_checkpointing
    walls: list[float] = []

    class StepClock(TrainerCallback):
        def on_train_begin(self, *a: Any, **k: Any) -> None:
            self.t = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            now = time.perf_counter()
            walls.append(now - self.t)
            self.t = now

    with tempfile.TemporaryDirectory(prefix="trl_smollm_") as out:
        config = GRPOConfig(
            output_dir=out, per_device_train_batch_size=per_step, gradient_accumulation_steps=1,
            num_generations=args.group, max_completion_length=args.max_new, beta=args.beta,
            learning_rate=args.lr, temperature=args.temperature, num_iterations=1, use_vllm=False,
            bf16=False, fp16=False, **ckpt_off, use_cpu=True, dataloader_num_workers=0,
            dataloader_pin_memory=False, max_steps=args.steps, logging_steps=1, report_to="none",
            save_strategy="no", eval_strategy="no", disable_tqdm=True, seed=args.seed, data_seed=args.seed,
        )
        trainer = GRPOTrainer(model=str(folder), reward_funcs=math_reward, args=config,
                              train_dataset=datasets.Dataset.from_list(rows), processing_class=tokenizer)
        trainer.add_callback(StepClock())
        t0 = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - t0
    measured = walls[args.warmup_steps:] or walls
    params = sum(p.numel() for p in trainer.model.parameters())
    info = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
        "model": {"params": params, "folder": str(folder)},
        "trl_resolved": {"loss_type": config.loss_type, "scale_rewards": config.scale_rewards,
                         "ref_model": trainer.ref_model is not None, "autocast_bf16": bool(config.bf16),
                         "generation_batch_size": config.generation_batch_size},
        "results": {"steps_run": len(walls), "sec_per_step_median": statistics.median(measured),
                    "per_step_wall": walls, "peak_rss_mb": peak_rss_bytes() / 2 ** 20, "train_seconds": train_s,
                    "gen_tokens_per_sec": float("nan"), "phase_seconds_measured": {},
                    "foreign_cpu_seconds_train": float("nan")},
    }
    if args.json_out:
        args.json_out.write_text(json.dumps(info, indent=1, default=str))
    print(f"trl_smollm steps={len(walls)} sec_per_step={info['results']['sec_per_step_median']:.3f} "
          f"peak_rss_mb={info['results']['peak_rss_mb']:.0f} params={params}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
