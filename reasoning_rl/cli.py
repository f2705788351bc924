"""`reasoning-rl-train`: a Hydra app over the configs in ``conf/`` (installed as ``reasoning_rl.conf``).

    reasoning-rl-train                                   # the built-in default: tiny model, arithmetic
    reasoning-rl-train task=gsm8k model=qwen2.5-0.5b-instruct algo.group_size=16 algo.beta=0.04
    reasoning-rl-train --multirun algo.beta=0,0.04 algo.group_size=4,8
    reasoning-rl-train algo=dapo                         # an algorithm preset: conf/algo/<name>.yaml
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from reasoning_rl.atomic import atomic_write_text
from reasoning_rl.config import TrainConfig, register_configs

log = logging.getLogger("reasoning_rl")

register_configs()


def to_train_config(cfg: DictConfig) -> TrainConfig:
    """Typed config from the composed Hydra config (validates types and keys).

    ``algo`` becomes the chosen algorithm's own dataclass (``algo.name`` through the
    registry): already so when its YAML lists ``<name>_schema``; otherwise its values are
    merged into that dataclass here, which rejects unknown keys by name."""
    from reasoning_rl.algo.registry import get_algorithm

    train_cfg: TrainConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    entry = get_algorithm(train_cfg.algo.name)
    if not isinstance(train_cfg.algo, entry.config_class):
        merged = OmegaConf.merge(OmegaConf.structured(entry.config_class), OmegaConf.to_container(cfg.algo))
        train_cfg.algo = OmegaConf.to_object(merged)  # type: ignore[assignment]
    return train_cfg


def format_eval_table(summary: dict) -> str:
    """The before/after held-out table printed at the end of a run."""
    before, after = summary.get("eval_before"), summary.get("eval_after")
    if not before or not after:
        return ""
    label = summary.get("label", "GRPO")
    lines = [
        f"| held-out accuracy | before {label} | after {label} | change |",
        "|---|---|---|---|",
    ]
    for key, label in (("greedy_accuracy", "greedy"), ("sampled_accuracy", f"sampled (n={after['samples_per_problem']})")):
        lines.append(f"| {label} | {before[key]:.1%} | {after[key]:.1%} | {after[key] - before[key]:+.1%} |")
    lines.append(f"({after['num_problems']} problems never seen in training)")
    return "\n".join(lines)


@hydra.main(version_base="1.3", config_path="pkg://reasoning_rl.conf", config_name="train")
def _hydra_main(cfg: DictConfig) -> float:
    from reasoning_rl.trainer import Trainer

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    train_cfg = to_train_config(cfg)
    run_dir = Path(train_cfg.trainer.output_dir or HydraConfig.get().runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    log.info("run folder: %s", run_dir)
    trainer = Trainer(train_cfg, run_dir)
    try:
        summary = trainer.train()
    finally:
        trainer.close()
    table = format_eval_table(summary)
    if table:
        atomic_write_text(run_dir / "eval_table.md", table + "\n")
        print("\n" + table)
    print(f"\nrun folder: {run_dir}\nfinal checkpoint: {summary['final_checkpoint']}\nreward curve: {summary['plot']}")
    if "warm_start" in summary:
        ws = summary["warm_start"]
        print(f"warm start: {ws['steps']} supervised steps, probe accuracy {ws['probe_accuracy']:.1%}")
    after = summary.get("eval_after") or {}
    return float(after.get("greedy_accuracy", 0.0))


def train_main() -> None:
    """Console-script entry point."""
    _hydra_main()


if __name__ == "__main__":
    train_main()
