"""Run under torchrun (2 gloo ranks) by test_distributed.py: the policy is sharded with FSDP2 and
its full parameters are gathered on both ranks, then rank 0 alone samples from it with the HF
engine while rank 1 waits at a barrier, as the trainer's held-out evaluation does.
Prints the completions on rank 0; must not hang."""

from __future__ import annotations

import torch

from reasoning_rl import distributed
from reasoning_rl.policy.engines import HFEngine
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.rollouts.sampling import SamplingConfig


def main() -> None:
    torch.set_num_threads(1)
    distributed.init_from_env("gloo", timeout_s=60.0)
    torch.manual_seed(0)
    model, tokenizer = build_tiny_model()  # the same init seed on both ranks
    distributed.shard_model(model)
    assert distributed.is_sharded(model)
    engine = distributed.FullParameterEngine(HFEngine(model, tokenizer), model)
    with distributed.full_parameters(model):  # gathered on every rank, as Trainer.evaluate does
        if distributed.is_main():
            groups = engine.generate(["What is 2 + 3?"], 2, SamplingConfig(max_new_tokens=6, do_sample=False))
            print("completions:", [c.text for c in groups[0]], flush=True)
        distributed.barrier()
    distributed.shutdown()


if __name__ == "__main__":
    main()
