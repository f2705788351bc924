"""The memory planner on the command line: the predicted peak of a training run by component.

    reasoning-rl-bench plan                                            # the default run (tiny model)
    reasoning-rl-bench plan model=qwen2.5-0.5b-instruct task=gsm8k algo.group_size=16 \\
        algo.prompts_per_step=8 rollout.max_new_tokens=1024 --device-gb 80
    reasoning-rl-bench plan model=smollm2-135m model.gradient_checkpointing=true --prompt-tokens 200

Everything that is not an option below is a training override, composed with the same Hydra
app and config as ``reasoning-rl-train`` (``reasoning_rl/conf/train.yaml``) and validated the
same way. The model is built on the meta device from its config (no weights are read;
``reasoning_rl/policy/shapes.py`` says where the config comes from). Printed: the components
(weights, reference, gradients, optimiser states, activations of one micro-batch, LM-head
chunk, backward working set, sampling cache, frozen forward; vLLM's share on a GPU), the peak
and the phase it falls in, whether it fits, and the largest micro-batch that fits.
The formulas are in ``reasoning_rl/policy/planner.py``; the measurements they were checked
against in docs/memory.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.perf.child import child_env
from benchmarks.perf.results import BenchResult, run_and_record

GB = 1024 ** 3


def compose_train_config(overrides: list[str]) -> Any:
    """The TrainConfig ``reasoning-rl-train <overrides>`` would run (same app, same checks)."""
    from hydra import compose, initialize_config_module

    from reasoning_rl.cli import to_train_config
    from reasoning_rl.config_store import register_configs
    from reasoning_rl.validation import validate

    register_configs()
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = to_train_config(compose(config_name="train", overrides=overrides))
    validate(cfg)
    return cfg


ALLOCATORS = {"kept": "true", "returned": "false", "auto": "null"}
"""``--measure`` runs -> ``trainer.keep_freed_memory`` (reasoning_rl.memory.allocator_choice): ``kept`` glibc
keeps freed blocks under 32 MiB resident; ``returned`` every block of 1 MiB or more is mapped on its own
and given back when freed, so the RSS follows the live tensors; ``auto`` the trainer's default (returned
for 50M parameters or more on a CPU with gradient checkpointing, else kept)."""


RANDOM_100M = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 4,
               "intermediate_size": 2048, "tie_word_embeddings": True}
"""``--build-random``: a Llama of 113M parameters (75.5M in its layers, 37.7M in the tied
embedding) with SmolLM2-135M's tokenizer and vocabulary (49,152), randomly initialised."""


def build_random(folder: Path) -> int:
    """Write the :data:`RANDOM_100M` model (seed 0) and SmolLM2's tokenizer to ``folder``; its parameters."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    smollm = compose_train_config(["model=smollm2-135m"]).model
    source = Path(smollm.gguf.cache_dir).expanduser() / smollm.name_or_path
    if not (source / "config.json").exists():
        raise SystemExit(f"--build-random takes SmolLM2's tokenizer from {source}: train or evaluate "
                         "model=smollm2-135m once to convert it (docs/models.md)")
    config = AutoConfig.from_pretrained(source)
    for key, value in RANDOM_100M.items():
        setattr(config, key, value)
    config.head_dim = config.hidden_size // config.num_attention_heads
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def measure_worker(overrides: list[str], run_dir: str) -> dict[str, Any]:
    """A short real training run in this process: its peak RSS, and the longest prompt and
    completion its updates saw (what the prediction is then made for)."""
    from reasoning_rl.memory import peak_rss_bytes
    from reasoning_rl.trainer import Trainer

    cfg = compose_train_config(overrides)
    trainer = Trainer(cfg, run_dir)
    seen = {"prompt": 0, "completion": 0, "completion_tokens": 0, "rows": 0}
    update = trainer.algorithm.update

    def recording_update(ro: Any) -> Any:
        seen["prompt"] = max(seen["prompt"], *(len(c.prompt_token_ids) for c in ro.completions))
        seen["completion"] = max(seen["completion"], *(len(c.token_ids) for c in ro.completions))
        seen["completion_tokens"] += sum(len(c.token_ids) for c in ro.completions)
        seen["rows"] += len(ro.completions)
        return update(ro)

    trainer.algorithm.update = recording_update
    try:
        trainer.train()
    finally:
        trainer.close()
    return {"peak_rss_bytes": peak_rss_bytes(), "prompt_tokens": seen["prompt"],
            "completion_tokens": seen["completion"], "mean_completion": seen["completion_tokens"] / max(1, seen["rows"])}


def measure(overrides: list[str], allocator: str) -> dict[str, Any]:
    """:func:`measure_worker` in a fresh interpreter under ``allocator`` (:data:`ALLOCATORS`)."""
    # GLIBC_TUNABLES dropped: the trainer makes its own mallopt settings (trainer.keep_freed_memory)
    env = child_env({k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"})
    extra = [f"trainer.keep_freed_memory={ALLOCATORS[allocator]}"]
    with tempfile.TemporaryDirectory(prefix="plan_measure_") as tmp:
        cmd = [sys.executable, "-m", "benchmarks.perf.plan", "--measure-worker", json.dumps([*overrides, *extra]),
               str(Path(tmp) / "run")]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"the measured run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(argv: list[str]) -> BenchResult:
    from reasoning_rl.policy.planner import estimate

    p = argparse.ArgumentParser(prog="reasoning-rl-bench plan", description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device-gb", type=float, default=None,
                   help="memory of the device in GB (default: the CUDA device's, else this machine's RAM)")
    p.add_argument("--prompt-tokens", type=int, default=256, help="longest prompt in tokens (default 256)")
    p.add_argument("--measure", nargs="*", choices=list(ALLOCATORS), default=None,
                   help="also train these overrides for real (fresh process per allocator, default kept): "
                        "predicted (for the prompt and completion lengths the run saw) against measured peak RSS")
    p.add_argument("--build-random", type=Path, default=None, metavar="DIR",
                   help="write the ~100M-parameter random Llama of the validation (RANDOM_100M) to DIR and stop")
    args, overrides = p.parse_known_args(argv)
    if args.build_random is not None:
        params = build_random(args.build_random)
        print(f"{args.build_random}: random Llama, {params:,} parameters, SmolLM2's tokenizer")
        return BenchResult(0, {"build_random": str(args.build_random)}, {"parameters": params})
    unknown = [o for o in overrides if o.startswith("-")]
    if unknown:
        p.error(f"unknown option(s) {' '.join(unknown)}; training overrides are key=value")
    if args.prompt_tokens < 1 or (args.device_gb is not None and args.device_gb <= 0):
        p.error("--prompt-tokens must be >= 1 and --device-gb > 0")
    plan = estimate(compose_train_config(overrides), args.device_gb, args.prompt_tokens)
    w = plan.workload
    print(f"overrides: {' '.join(overrides) or '(none: the default run)'}")
    for note in plan.notes:
        print(note)
    print(f"G={w.group_size} x {w.prompts_per_step} prompts, {w.prompt_tokens} prompt + {w.completion_tokens} "
          f"completion tokens; micro-batch {w.micro_batch_rows} rows; reference {'on' if w.reference else 'off'}; "
          f"checkpointing {'on' if w.checkpointing else 'off'}; LM-head chunk {w.lm_head_chunk or 'off'}; "
          f"weights {w.weight_bytes} bytes, activations {w.activation_bytes} bytes an element"
          + (f"; LoRA r={w.lora_rank}" if w.lora_rank else ""))
    print(plan.table())
    print(plan.summary())
    figures = {"peak_gb": plan.peak_bytes / GB, "phase": plan.phase, "fits": plan.fits,
               "device_gb": plan.device_bytes / GB, "largest_micro_batch": plan.largest_micro_batch,
               "micro_batch_rows": w.micro_batch_rows, "parameters": plan.model.parameters,
               "config_source": plan.model.source,
               "components_gb": {k: v / GB for k, v in plan.components.items()}}
    if args.measure is not None:
        figures["measured"] = compare(overrides, args.measure or ["kept"], args.device_gb)
    return BenchResult(0, {"overrides": overrides, **vars(args)}, figures)


def compare(overrides: list[str], allocators: list[str], device_gb: float | None) -> dict[str, Any]:
    """Train for real under each allocator; predict for the lengths each run saw; print both."""
    from reasoning_rl.policy.planner import estimate

    out = {}
    for allocator in allocators:
        got = measure(overrides, allocator)
        cfg = compose_train_config([*overrides, f"rollout.max_new_tokens={max(1, got['completion_tokens'])}"])
        predicted = estimate(cfg, device_gb, max(1, got["prompt_tokens"])).peak_bytes
        error = predicted / got["peak_rss_bytes"] - 1
        print(f"[measured, {allocator}] peak RSS {got['peak_rss_bytes'] / GB:.3f} GB; predicted {predicted / GB:.3f} GB "
              f"for prompts of {got['prompt_tokens']} and completions of {got['completion_tokens']} tokens (mean "
              f"{got['mean_completion']:.1f}): {100 * error:+.1f}%")
        out[allocator] = {**got, "predicted_bytes": predicted, "error": error}
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--measure-worker":  # one measured run, in the fresh interpreter measure() started
        print(json.dumps(measure_worker(json.loads(argv[1]), argv[2])))
        return 0
    return run_and_record("plan", run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
