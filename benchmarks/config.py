"""Typed schema of the ``reasoning-rl-eval`` config (``conf/eval.yaml``), registered with Hydra.

Exactly one of ``model``, ``samples``, ``run_dir`` says what to evaluate (or
``write_reference_samples`` to only write the benchmarks' reference samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class EvalConfig:
    """Settings of one ``reasoning-rl-eval`` invocation."""

    benchmark: Any = MISSING
    """Dataset definition name (``reasoning_rl/tasks/definitions/``, the same ones ``task=`` trains on), the path
    of a definition YAML, a list (``benchmark=[gsm8k,math500]``), or ``all`` for every shipped one."""
    model_name_or_path: str | None = None
    """Checkpoint folder (``save_pretrained`` output) or Hugging Face model name to generate with.
    On the command line ``model=X`` works too (see :func:`benchmarks.cli.model_alias`)."""
    samples: str | None = None
    """JSONL of existing completions (``task_id``, ``completion``) to score without any model."""
    run_dir: str | None = None
    """Training run folder: evaluate every ``checkpoint-<step>/`` in it and plot accuracy against step."""
    write_reference_samples: str | None = None
    """Folder to write ``<benchmark>.reference.jsonl`` and ``.corrupted.jsonl`` into, then stop."""

    data_dir: str | None = None
    """Folder of local benchmark files (e.g. /work/shared/data), each split's ``local_file``; default: the hub."""
    data_files: str | None = None
    """One local data file for the evaluated split of the (single) benchmark, overriding ``data_dir`` and the hub."""
    split: str | None = None
    """Split of the definition to evaluate instead of its ``eval_split`` (e.g. ``train``)."""
    limit: int | None = None
    """Evaluate only the first ``limit`` problems."""

    n: int = 1
    """Samples per problem."""
    k: list[int] = field(default_factory=lambda: [1])
    """The k of pass@k and maj@k (each needs k <= n)."""
    temperature: float = 0.0
    """Sampling temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off)."""
    top_k: int = 0
    """Keep the k most likely tokens (0 = off)."""
    max_new_tokens: int = 512
    """Longest completion, in tokens."""
    chat_template: bool | None = None
    """Wrap prompts in the tokenizer's chat template; null = when the tokenizer has one."""
    system_prompt: str | None = None
    """System message (chat) or text put before the prompt (raw)."""
    num_fewshot: int = 0
    """Worked examples put before each question (from the benchmark's few-shot source)."""
    seed: int = 0
    """Sampling seed (problem i of a chunk starting at s uses seed + s)."""

    backend: str = "auto"
    """Generation backend: ``auto`` (vllm when the vllm extra is installed and a GPU is there, else hf),
    ``hf`` (transformers ``generate``) or ``vllm`` (needs the vllm extra)."""
    device: str = "auto"
    """``auto``, ``cpu``, ``cuda``..."""
    dtype: str = "float32"
    """Model dtype: float32, bfloat16, float16 (vllm: float32 means the checkpoint's own dtype)."""
    batch_size: int = 16
    """Sequences per ``generate`` call (hf backend)."""
    tensor_parallel_size: int = 1
    """vllm backend: GPUs the model is sharded over (vLLM's tensor parallelism, for models that do
    not fit one GPU or to generate faster); must not exceed the GPUs the machine has."""
    gpu_memory_utilization: float = 0.9
    """vllm backend: share of each GPU's memory vLLM may take (weights, activations, KV cache)."""
    max_model_len: int | None = None
    """vllm backend: longest prompt + completion in tokens; null = the model's own limit (a lower
    value leaves more memory for the KV cache)."""
    generation_chunk: int = 32
    """Problems generated between two cache writes (and progress-bar steps)."""

    allow_code_execution: bool = False
    """Must be true for code benchmarks (humaneval, mbpp): they RUN model-written programs."""
    score_timeout: float | None = None
    """Seconds before a verifier call is killed (status ``timeout``); null = the benchmark's own limit."""
    score_workers: int | None = None
    """Scoring worker processes (default: one per core)."""
    verifier_options: dict[str, Any] = field(default_factory=dict)
    """Overrides of the benchmark's verifier options (changes the score cache key)."""
    maj_equivalence: bool = True
    """Merge maj@k vote groups whose answers the verifier calls equal (0.5 vs \\frac12)."""

    output_dir: str = "eval_results"
    """Where results go: ``<output_dir>/<model>/<benchmark>/results.json`` and ``summary.md``."""
    overwrite: bool = False
    """Ignore cached generations and scores, redo everything."""
    progress: bool = True
    """Show tqdm progress bars."""


def register_configs() -> None:
    """Make the schema known to Hydra; ``conf/eval.yaml`` extends it through its defaults list."""
    ConfigStore.instance().store(name="eval_schema", node=EvalConfig)
