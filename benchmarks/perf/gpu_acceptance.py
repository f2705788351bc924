"""``reasoning-rl-bench gpu --acceptance``: the checks to run on the first GPU lent, one table, < 8 min.

    reasoning-rl-bench gpu --acceptance                  # on a CUDA GPU: every row
    reasoning-rl-bench gpu --acceptance --device cpu --small   # rows that can run on the CPU, at small shapes

Each row runs in a fresh interpreter (``python -m benchmarks.perf.gpu_acceptance --row NAME``), so
CUDA's peak-memory counter and vLLM's state belong to that row alone, and a row that fails or runs
past its time limit is reported without stopping the others. A row whose needs are missing (no
CUDA device, no ``vllm`` package) prints one line saying what it skipped and why.

Rows (:data:`ROWS`), at the ``gsm8k_qwen05b`` preset's shapes: Qwen2.5-0.5B's decoder layers
(hidden 896, 24 layers, 14 heads of 64, MLP 4864) built with random weights by the tiny family
(``model.tiny.arch=qwen2``; no download, so its vocabulary is the tiny tokenizer's, except in the
LM-head row, which takes Qwen's 151,936), float32 master weights, bf16 autocast, a bf16
reference, gradient checkpointing, G = 16 x 16 prompts, micro-batch 16:

- ``vllm_tests``: the real-engine tests (``pytest -m vllm``) on CUDA;
- ``grpo_memory``: one GRPO step; the planner's predicted peak (for the prompt and completion
  lengths the step saw) against ``torch.cuda.max_memory_allocated``, pass within 15%;
- ``bf16_vs_fp32``: completion log-probs of one batch under bf16 autocast against float32;
- ``lean_vs_hf``: the lean runtime's log-probs against transformers' modules on the device;
- ``lm_head``: the chunked LM head against full logits (log-probs and their gradient), and the peak
  memory of each;
- ``vllm_vs_native``: generation tokens per second of ``reasoning-rl-bench gpu --backend vllm``
  against ``--backend native``.

Tolerances are the project's (``reasoning_rl.policy.runtime_check.TOLERANCES``: what the start-up
runtime check accepts for the dtype). Nothing here has run on a GPU yet (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GB = 1024 ** 3

QWEN05B_LAYERS = ["model.tiny.arch=qwen2", "model.tiny.hidden_size=896", "model.tiny.num_layers=24",
                  "model.tiny.num_heads=14", "model.tiny.intermediate_size=4864",
                  "model.tiny.max_position_embeddings=1024"]
SMALL_LAYERS = ["model.tiny.arch=qwen2", "model.tiny.hidden_size=128", "model.tiny.num_layers=2",
                "model.tiny.num_heads=2", "model.tiny.intermediate_size=256"]
PRESET = ["model.dtype=float32", "model.reference_dtype=bfloat16", "model.gradient_checkpointing=true",
          "trainer.precision=bf16", "algo.group_size=16", "algo.prompts_per_step=16", "algo.micro_batch_size=16",
          "algo.kl.beta=0.04", "rollout.max_new_tokens=512", "trainer.steps=1", "warmstart.enabled=false",
          "evaluation.enabled=false", "trainer.tensorboard=false", "trainer.progress_bar=false"]
"""conf/experiment/gsm8k_qwen05b.yaml's training settings, one step, on the built-in task (offline)."""
QWEN_VOCAB = 151_936
MEMORY_TOLERANCE = 0.15


@dataclass
class Row:
    name: str
    what: str
    needs_cuda: bool
    needs_vllm: bool
    timeout_s: int


ROWS = [
    Row("vllm_tests", "vLLM real-engine tests on CUDA (pytest -m vllm)", True, True, 240),
    Row("grpo_memory", "GRPO step at gsm8k_qwen05b shapes: planner peak vs max_memory_allocated (15%)", True, False, 150),
    Row("bf16_vs_fp32", "completion log-probs, bf16 autocast vs float32, same batch", False, False, 90),
    Row("lean_vs_hf", "lean runtime vs transformers' modules on the device", False, False, 90),
    Row("lm_head", "chunked LM head vs full logits (Qwen's vocabulary)", False, False, 90),
    Row("vllm_vs_native", "generation tokens/s: vLLM vs the native engine", True, True, 240),
]


def skip_reason(row: Row, device: str) -> str | None:
    """Why ``row`` cannot run here (None: it can)."""
    import torch

    if (row.needs_cuda or device == "cuda") and not torch.cuda.is_available():
        return "no CUDA GPU here (torch.cuda.is_available() is False)"
    if row.needs_cuda and device == "cpu":
        return "needs CUDA (--device cpu)"
    if row.needs_vllm:
        from reasoning_rl.policy.vllm.availability import vllm_available

        if not vllm_available():
            return "the vllm package does not import (pip install '.[vllm]')"
    return None


# -- the rows, each in its own process -----------------------------------------------------------------

def _model(device: str, small: bool) -> tuple[Any, Any]:
    from benchmarks.perf.plan import compose_train_config
    from reasoning_rl.policy.loading import load_model

    cfg = compose_train_config([*(SMALL_LAYERS if small else QWEN05B_LAYERS), f"model.device={device}"])
    return load_model(cfg.model)


def _batch(tokenizer: Any, device: str, rows: int, prompt: int, completion: int) -> tuple[Any, Any, int]:
    import torch

    g = torch.Generator().manual_seed(0)
    high = len(tokenizer) - 1
    ids = torch.randint(1, high, (rows, prompt + completion), generator=g)
    return ids.to(device), torch.ones_like(ids).to(device), prompt


def row_bf16_vs_fp32(device: str, small: bool) -> dict[str, Any]:
    import torch

    from reasoning_rl.policy.logprobs import completion_logprobs
    from reasoning_rl.policy.runtime_check import tolerance_for

    model, tok = _model(device, small)
    ids, mask, start = _batch(tok, device, 8, 32, 64)
    with torch.no_grad():
        fp32, _ = completion_logprobs(model, ids, mask, start)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            bf16, _ = completion_logprobs(model, ids, mask, start)
    diff = (bf16.float() - fp32).abs()
    tol = tolerance_for(torch.bfloat16)
    return {"ok": bool(diff.max() <= tol), "figure": f"max {float(diff.max()):.3g}, mean {float(diff.mean()):.3g} nats",
            "detail": f"tolerance {tol:g} (bf16); {diff.numel()} tokens"}


def row_lean_vs_hf(device: str, small: bool) -> dict[str, Any]:
    import torch

    from reasoning_rl.policy.loading import set_training
    from reasoning_rl.policy.logprobs import completion_logprobs
    from reasoning_rl.policy.runtime import decide_runtime, set_runtime
    from reasoning_rl.policy.runtime_check import tolerance_for

    model, tok = _model(device, small)
    set_training(model, False)
    set_runtime(model, decide_runtime(model, "lean", training=False))
    ids, mask, start = _batch(tok, device, 8, 32, 64)
    with torch.no_grad():
        lean, _ = completion_logprobs(model, ids, mask, start)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, start - 1:-1].float()
    module = logits.log_softmax(-1).gather(-1, ids[:, start:].unsqueeze(-1)).squeeze(-1)
    diff = float((lean.float() - module).abs().max())
    tol = tolerance_for(torch.float32)
    return {"ok": diff <= tol, "figure": f"max {diff:.3g} nats", "detail": f"tolerance {tol:g} (float32)"}


def row_lm_head(device: str, small: bool) -> dict[str, Any]:
    import torch

    from reasoning_rl.policy.lm_head import token_logprobs
    from reasoning_rl.policy.runtime_check import tolerance_for

    n, d, v, chunk = (256, 64, 1000, 64) if small else (4096, 896, QWEN_VOCAB, 1024)
    g = torch.Generator().manual_seed(0)
    hidden = (torch.randn(n, d, generator=g) / d ** 0.5).to(device).requires_grad_(True)
    weight = torch.randn(v, d, generator=g).to(device)
    targets = torch.randint(0, v, (n,), generator=g).to(device)
    peaks = {}
    results = {}
    for name in ("full", "chunked"):
        hidden.grad = None
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        if name == "full":
            logp = (hidden @ weight.T).float().log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)
        else:
            logp, _ = token_logprobs(hidden, weight, None, targets, chunk=chunk)
        logp.sum().backward()
        if device == "cuda":
            peaks[name] = (torch.cuda.max_memory_allocated() - base) / GB
        results[name] = (logp.detach(), hidden.grad.detach().clone())
    diff = float((results["chunked"][0] - results["full"][0]).abs().max())
    grad = float((results["chunked"][1] - results["full"][1]).abs().max())
    tol = tolerance_for(torch.float32)
    memory = f"; peak {peaks['full']:.2f} GB full, {peaks['chunked']:.2f} GB chunked" if peaks else ""
    return {"ok": diff <= tol and grad <= tol, "figure": f"log-prob max {diff:.3g}, grad max {grad:.3g}{memory}",
            "detail": f"{n} positions x vocabulary {v}, chunk {chunk}; tolerance {tol:g}"}


def row_grpo_memory(device: str, small: bool) -> dict[str, Any]:
    import torch

    from benchmarks.perf.plan import compose_train_config, measure_worker
    from reasoning_rl.policy.planner import estimate

    overrides = [*(SMALL_LAYERS if small else QWEN05B_LAYERS), *PRESET, f"model.device={device}"]
    torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory(prefix="acceptance_grpo_") as tmp:
        seen = measure_worker(overrides, str(Path(tmp) / "run"))
    measured = torch.cuda.max_memory_allocated()
    cfg = compose_train_config([*overrides, f"rollout.max_new_tokens={max(1, seen['completion_tokens'])}"])
    predicted = estimate(cfg, None, max(1, seen["prompt_tokens"])).peak_bytes
    error = predicted / measured - 1
    return {"ok": abs(error) <= MEMORY_TOLERANCE,
            "figure": f"predicted {predicted / GB:.2f} GB, measured {measured / GB:.2f} GB ({100 * error:+.1f}%)",
            "detail": f"prompts of {seen['prompt_tokens']}, completions of {seen['completion_tokens']} tokens"}


def _bench_gpu(backend: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.bench", "gpu", "--backend", backend, "--no-results"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=200)
    line = next((x for x in reversed(out.stdout.splitlines()) if x.startswith("BENCH_RESULT")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"reasoning-rl-bench gpu --backend {backend} failed: {(out.stderr or out.stdout)[-300:]}")
    return json.loads(line.split(" ", 1)[1])["figures"]


def row_vllm_vs_native(device: str, small: bool) -> dict[str, Any]:
    vllm, native = _bench_gpu("vllm"), _bench_gpu("native")
    a, b = vllm.get("generation_tokens_per_s"), native.get("generation_tokens_per_s")
    ratio = f" ({a / b:.1f}x)" if a and b else ""
    return {"ok": bool(a and b), "figure": f"vLLM {a:.0f} tok/s, native {b:.0f} tok/s{ratio}" if a and b else "no figure",
            "detail": f"on {vllm.get('gpu', '?')}"}


def row_vllm_tests(device: str, small: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-m", "vllm", "-q", "-p", "no:cacheprovider",
           "tests/reasoning_rl/policy/test_vllm_engine.py"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=230)
    summary = (out.stdout.strip().splitlines() or ["no output"])[-1]
    return {"ok": out.returncode == 0, "figure": summary, "detail": "tests/reasoning_rl/policy/test_vllm_engine.py"}


RUNNERS: dict[str, Callable[[str, bool], dict[str, Any]]] = {
    "vllm_tests": row_vllm_tests, "grpo_memory": row_grpo_memory, "bf16_vs_fp32": row_bf16_vs_fp32,
    "lean_vs_hf": row_lean_vs_hf, "lm_head": row_lm_head, "vllm_vs_native": row_vllm_vs_native,
}


# -- the table ---------------------------------------------------------------------------------------

def run_row(row: Row, device: str, small: bool) -> dict[str, Any]:
    """``row`` in a fresh interpreter; its result, or a failure saying how it ended."""
    cmd = [sys.executable, "-m", "benchmarks.perf.gpu_acceptance", "--row", row.name, "--device", device,
           *(["--small"] if small else [])]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=row.timeout_s,
                             env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    except subprocess.TimeoutExpired:
        return {"ok": False, "figure": f"ran past {row.timeout_s} s", "detail": "", "seconds": row.timeout_s}
    seconds = time.perf_counter() - t0
    last = (out.stdout.strip().splitlines() or [""])[-1]
    try:
        result = json.loads(last)
    except json.JSONDecodeError:
        error = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]
        result = {"ok": False, "figure": "error", "detail": error[:200]}
    return {**result, "seconds": seconds}


def acceptance(device: str, small: bool) -> tuple[int, dict[str, Any]]:
    """Every row (or its skip line), then the table; exit code 1 when a row that ran failed."""
    results: dict[str, Any] = {}
    for row in ROWS:
        reason = skip_reason(row, device)
        if reason is not None:
            print(f"skipped {row.name}: {row.what}: {reason}")
            results[row.name] = {"skipped": reason}
            continue
        results[row.name] = run_row(row, device, small)
    ran = {k: v for k, v in results.items() if "skipped" not in v}
    if ran:
        print("\n| check | result | figure | detail | s |\n|---|---|---|---|---|")
        for row in ROWS:
            r = results[row.name]
            if "skipped" not in r:
                print(f"| {row.what} | {'pass' if r['ok'] else 'FAIL'} | {r['figure']} | {r['detail']} | "
                      f"{r['seconds']:.0f} |")
    return (0 if all(v["ok"] for v in ran.values()) else 1), results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.perf.gpu_acceptance")
    p.add_argument("--row", choices=list(RUNNERS), required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--small", action="store_true")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    result = RUNNERS[args.row](args.device, args.small)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
