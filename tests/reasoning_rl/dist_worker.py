"""One GRPO run of the tiny model with a fixed, deterministic rollout engine, for
tests/reasoning_rl/test_distributed.py. Run as ``python dist_worker.py OUT RUN STEPS [resume]`` (one
process) or under ``torchrun --nproc_per_node 2`` (two ranks, gloo). Writes ``OUT/rank<r>.pt``:
the gradient each optimiser step applied (after the all-reduce and clipping), the final
parameters, the logged grad norms, and what each rank saw of the checkpoints."""

from __future__ import annotations

import sys
import time
import zlib
from pathlib import Path

import torch

from reasoning_rl import checkpoint as ckpt
from reasoning_rl import distributed
from reasoning_rl.config import TrainConfig
from reasoning_rl.models import TinyModelConfig
from reasoning_rl.rollout import Completion
from rewards.compose import RewardSpec


class FixedEngine:
    """Completions that depend only on the prompt and the sample's index in its group: the same
    on every rank and in every run, whatever the seed. Even samples start with a digit (reward 1
    under the format reward below), odd ones with a letter (0); lengths vary (1-4 tokens)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.policy_version = tokenizer, 0

    def update_policy(self, model, version: int) -> None:
        self.policy_version = version

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
    cfg = TrainConfig()
    cfg.model.tiny = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    cfg.task.prompt_template = "{question} Answer: "
    cfg.task.max_train_examples = 64
    cfg.task.max_eval_examples = 4
    cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "^[0-9]"})]
    cfg.algo.prompts_per_step = 4
    cfg.algo.group_size = 4
    cfg.algo.micro_batch_size = 3  # uneven accumulation on each rank
    cfg.algo.learning_rate = 1e-3
    cfg.algo.beta = 0.04  # a reference model, and a KL gradient from step 2 on
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


def main(out: str, run_dir: str, steps: int, resume: bool) -> None:
    from reasoning_rl.trainer import Trainer

    writes: list[str] = []
    write = ckpt.atomic_directory_write

    def slow_write(final, fn):  # rank 0 takes its time: a rank that did not wait would see nothing
        writes.append(Path(final).name)
        time.sleep(0.3)
        return write(final, fn)

    ckpt.atomic_directory_write = slow_write
    trainer = Trainer(config(run_dir, steps, resume), run_dir)
    trainer.engine = trainer.context.engine = FixedEngine(trainer.tokenizer)
    grads: list[torch.Tensor] = []
    seen: list[bool] = []
    setup = trainer.algorithm.setup

    def setup_and_watch(state):
        setup(state)
        opt = trainer.algorithm.optimizer
        step = opt.step

        def recording_step(*a, **k):
            grads.append(torch.cat([p.grad.reshape(-1).clone() for p in trainer.model.parameters()]))
            return step(*a, **k)

        opt.step = recording_step

    trainer.algorithm.setup = setup_and_watch
    save = trainer.save

    def save_and_look():
        path = save()
        seen.append((path / ckpt.STATE_FILE).exists() and (path / "config.json").exists())
        return path

    trainer.save = save_and_look
    try:
        trainer.train()
        params = torch.cat([p.detach().reshape(-1).clone() for p in trainer.model.parameters()])
        result = {"grads": grads, "params": params, "writes": writes, "seen_complete": seen,
                  "world_size": distributed.world_size()}
        torch.save(result, Path(out) / f"rank{distributed.rank()}.pt")
    finally:
        trainer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == "resume")
