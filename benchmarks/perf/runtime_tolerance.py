"""The start-up equality check's figures by model, runtime and dtype: the tolerances of
``reasoning_rl.policy.runtime_check.TOLERANCES`` come from these (docs/models.md).

    python -m benchmarks.perf.runtime_tolerance                 # the tiny Llama and Qwen2 models
    python -m benchmarks.perf.runtime_tolerance --smollm        # also SmolLM2-135M (model=smollm2-135m installed)

For each model, runtime (lean, hf) and dtype (float32, bfloat16, float16): ``check_runtime`` with the
native engine on 2 prompts x 4 samples x 8 sampled tokens, 5 seeds; prints the worst
``max |runtime - module|`` log-prob difference. One torch thread.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

PROMPTS = ["What is 17 + 25? Answer: ", "Compute 3 * 14 and give the result. Answer: "]
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def worst_difference(model, tokenizer, runtime: str, dtype: torch.dtype, seeds: int = 5) -> tuple[float, int]:
    """The worst start-up difference over ``seeds`` seeds, and the tokens compared in the last."""
    from reasoning_rl.policy import runtime_check
    from reasoning_rl.policy.engines import NativeEngine
    from reasoning_rl.policy.runtime import decide_runtime, set_runtime
    from reasoning_rl.rollouts.sampling import SamplingConfig

    model.to(dtype)
    set_runtime(model, decide_runtime(model, runtime))
    engine = NativeEngine(model, tokenizer)
    saved = dict(runtime_check.TOLERANCES)
    runtime_check.TOLERANCES[dtype] = float("inf")  # measure, do not stop
    try:
        checks = [runtime_check.check_runtime(model, tokenizer, engine, PROMPTS, SamplingConfig(max_new_tokens=8),
                                              group_size=4, seed=seed, new_tokens=8) for seed in range(seeds)]
    finally:
        runtime_check.TOLERANCES.clear()
        runtime_check.TOLERANCES.update(saved)
    return max(c.max_abs_diff for c in checks), checks[-1].tokens


def main(argv: list[str] | None = None) -> None:
    from reasoning_rl.policy.loading import build_tiny_model, load_pretrained
    from reasoning_rl.settings.model import TinyModelConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smollm", action="store_true", help="also SmolLM2-135M (its converted folder)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    models = [(f"tiny-{arch}", lambda arch=arch: build_tiny_model(TinyModelConfig(arch=arch))) for arch in
              ("llama", "qwen2")]
    if args.smollm:
        folder = os.path.expanduser("~/.cache/reasoning_rl/models/smollm2-135m-instruct")
        models.append(("smollm2-135m", lambda: load_pretrained(folder, device="cpu", dtype="float32")))
    for name, build in models:
        model, tokenizer = build()
        for runtime in ("lean", "hf"):
            for dtype in DTYPES:
                t0 = time.perf_counter()
                worst, tokens = worst_difference(model, tokenizer, runtime, dtype)
                print(f"{name} {runtime} {str(dtype).removeprefix('torch.')}: worst max|diff| over 5 seeds "
                      f"{worst:.3e} ({tokens} tokens, {time.perf_counter() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
