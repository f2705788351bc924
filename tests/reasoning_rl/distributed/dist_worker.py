"""One GRPO run of the tiny model with a fixed, deterministic rollout engine, for
tests/reasoning_rl/distributed/test_distributed.py. Run as ``python dist_worker.py OUT RUN STEPS [FLAG ...]`` (one
process) or under ``torchrun --nproc_per_node 2`` (two ranks, gloo); flags: ``resume``, ``fsdp``
(trainer.fsdp=true), ``cli`` (through ``reasoning_rl.cli.run_training``, the torchrun entry point,
recording which rank wrote which run-folder file and what it printed). Writes ``OUT/rank<r>.pt``:
the gradient each optimiser step applied (after the all-reduce or FSDP's reduce-scatter, and
clipping; full tensors), the final parameters, what each rank saw of the checkpoints, the CLI's writes."""

from __future__ import annotations

import sys
import time
import zlib
from pathlib import Path

import torch

from reasoning_rl import distributed
from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.config import TrainConfig
from reasoning_rl.rollouts.sampling import Completion
from reasoning_rl.rollouts.stack import RolloutStack
from reasoning_rl.run_folder import checkpoint as ckpt
from reasoning_rl.settings.model import TinyModelConfig
from rewards.specs import RewardSpec


class FixedEngine:
    """Completions that depend only on the prompt and the sample's index in its group: the same
    on every rank and in every run, whatever the seed. Even samples start with a digit (reward 1
    under the format reward below), odd ones with a letter (0); lengths vary (1-4 tokens)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.policy_version = tokenizer, 0

    def update_policy(self, model, version: int) -> None:
        self.policy_version = version

    def pop_metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        """Holds nothing to release."""

    def generate(self, prompts, n, sampling, seed=None):
        tok = self.tokenizer
        out = []
        for p in prompts:
            h = zlib.crc32(p.encode())
            group = []
            for j in range(n):
                length = 1 + (h + j) % 4
                text = "".join(("0123456789" if j % 2 == 0 else "abcdefghij")[(h >> k) % 10] for k in range(length))
                ids = tok(text, add_special_tokens=False)["input_ids"]
                stop = (h + j) % 3 == 0
                group.append(Completion(text=text, token_ids=ids + ([tok.eos_token_id] if stop else []),
                                        finish_reason="stop" if stop else "length",
                                        prompt_token_ids=tok(p, add_special_tokens=False)["input_ids"],
                                        policy_version=self.policy_version))
            out.append(group)
        return out


def config(run_dir: str, steps: int, resume: bool) -> TrainConfig:
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.model.tiny = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    cfg.task.prompt_template = "{question} Answer: "
    cfg.task.max_train_examples = 64
    cfg.task.max_eval_examples = 4
    cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "^[0-9]"})]
    cfg.algo.prompts_per_step = 4
    cfg.algo.group_size = 4
    cfg.algo.micro_batch_size = 3  # uneven accumulation on each rank
    cfg.algo.learning_rate = 1e-3
    cfg.algo.kl.beta = 0.04  # a reference model, and a KL gradient from step 2 on
    cfg.algo.loss_aggregation = "token_mean"  # the global token count is the denominator
    cfg.algo.max_grad_norm = 0.05  # clipping on the global norm is active
    cfg.rollout.max_new_tokens = 5
    cfg.rollout.reward_workers = 0
    cfg.trainer.steps = steps
    cfg.trainer.save_every = 1
    cfg.trainer.keep_checkpoints = None
    cfg.trainer.resume = resume
    cfg.trainer.output_dir = run_dir
    cfg.trainer.progress_bar = False
    cfg.trainer.tensorboard = False
    cfg.trainer.num_threads = 1
    cfg.evaluation.num_examples = 4
    cfg.evaluation.samples_per_problem = 1
    return cfg


def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a DTensor (FSDP shard) gathered over the ranks (a collective), else itself."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def watched_trainer(record: dict):
    """A Trainer subclass that samples with FixedEngine and records into ``record``: each applied
    gradient, the final parameters, whether the models are sharded, what save() left on disk."""
    from reasoning_rl.trainer import Trainer

    class WatchedTrainer(Trainer):
        def __init__(self, cfg, run_dir) -> None:
            super().__init__(cfg, run_dir)
            self.rollouts = RolloutStack.single(FixedEngine(self.tokenizer),  # training and evaluation
                                                sharded=self.rollouts.sharded)
            self.context.engine = self.rollouts.rollout

        def _setup_algorithm(self) -> None:
            super()._setup_algorithm()  # sharded by now with trainer.fsdp
            opt, model = self.algorithm.optimizer, self.model
            step = opt.step

            def recording_step(*a, **k):
                record["grads"].append(torch.cat([_full(p.grad).reshape(-1).clone() for p in model.parameters()]))
                return step(*a, **k)

            opt.step = recording_step
            record["sharded"] = [distributed.is_sharded(m) for m in (model, *self.algorithm.held_models())]
            record["local_numel"] = sum(getattr(p, "to_local", lambda p=p: p)().numel() for p in model.parameters())

        def save(self):
            path = super().save()
            record["seen_complete"].append((path / ckpt.STATE_FILE).exists() and (path / "config.json").exists())
            return path

        def close(self) -> None:
            record["params"] = torch.cat([_full(p.detach()).reshape(-1).clone() for p in self.model.parameters()])
            record["world_size"] = distributed.world_size()
            super().close()

    return WatchedTrainer


def main(out: str, run_dir: str, steps: int, flags: set[str]) -> None:
    import contextlib
    import io

    import reasoning_rl.cli as cli
    import reasoning_rl.trainer

    record: dict = {"grads": [], "seen_complete": [], "writes": [], "cli_writes": [], "printed": ""}
    write = ckpt.atomic_directory_write

    def slow_write(final, fn):  # rank 0 takes its time: a rank that did not wait would see nothing
        record["writes"].append(Path(final).name)
        time.sleep(0.3)
        return write(final, fn)

    ckpt.atomic_directory_write = slow_write
    cfg = config(run_dir, steps, "resume" in flags)
    cfg.trainer.fsdp = "fsdp" in flags
    trainer_class = watched_trainer(record)
    if "cli" in flags:
        from omegaconf import OmegaConf

        write_text, write_status = cli.atomic_write_text, cli.write_status
        cli.atomic_write_text = lambda path, *a, **k: (record["cli_writes"].append(Path(path).name),
                                                       write_text(path, *a, **k))[1]
        cli.write_status = lambda d, status, **k: (record["cli_writes"].append(f"status:{status}"),
                                                   write_status(d, status, **k))[1]
        reasoning_rl.trainer.Trainer = trainer_class
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            cli.run_training(OmegaConf.structured(cfg))  # starts and ends the process group itself
        record["printed"] = printed.getvalue()
        rank = int(__import__("os").environ.get("RANK", "0"))
    else:
        trainer = trainer_class(cfg, run_dir)
        try:
            trainer.train()
            rank = distributed.rank()
        finally:
            trainer.close()
    torch.save(record, Path(out) / f"rank{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), set(sys.argv[4:]))
