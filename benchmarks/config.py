"""Typed schema of the ``reasoning-rl-eval`` config (``conf/eval.yaml``), registered with Hydra.

Exactly one of ``model``, ``samples``, ``run_dir`` says what to evaluate (or
``write_reference_samples`` to only write the benchmarks' reference samples).
:func:`validate` checks every setting before anything is loaded or written: the range of
each number (:data:`EVAL_RANGES`, :data:`EVAL_FREE`) and the combinations (k <= n, one mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from reasoning_rl.config_checks import (
    AT_LEAST_0,
    AT_LEAST_1,
    FRACTION,
    POSITIVE,
    SHARE,
    ConfigError,
    Range,
    problems_message,
    range_problems,
)
from reasoning_rl.settings.task import EpisodeConfig


@dataclass
class EvalConfig:
    """Settings of one ``reasoning-rl-eval`` invocation."""

    benchmark: Any = None
    """Dataset definition name (``reasoning_rl/tasks/definitions/``, the same ones ``task=`` trains on, and the
    evaluation-only ``benchmarks/definitions/``), the path of a definition YAML, a list
    (``benchmark=[gsm8k,math500]``), or ``all`` for every one whose data ``data_dir`` (or the hub) provides."""
    suite: str | None = None
    """Instead of ``benchmark=``: a suite (``conf/eval_suites/``: ``math_reasoning``, ``math_reasoning_full``,
    ``grade_school``, ``code``) or a suite YAML path; one table of every member with 95% intervals
    (``benchmarks/suite_run.py``). With ``samples=``, a folder of ``<benchmark>.jsonl`` files or a path
    with ``*`` for the benchmark's name (``samples=refs/*.reference.jsonl``)."""
    compare: list[str] = field(default_factory=list)
    """Two (or more) checkpoints or hub names evaluated on the same problems and sample seeds
    (``compare=[A,B]``, needs ``suite=``): each one's table, and B - A per benchmark with a paired
    bootstrap interval. ``compare=[run:<run_dir>]`` takes a training run's first and last checkpoint."""
    bootstrap: int = 1000
    """Bootstrap replicates of every interval in a suite table (``benchmarks/intervals.py``)."""
    confidence: float = 0.95
    """Coverage of the intervals of a suite table."""
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
    """Folder of local benchmark files (e.g. ../shared/data), each split's ``local_file``; default: the hub."""
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
    ``hf`` (transformers ``generate``), ``native`` (the training rollouts' own decode loop, on the lean
    runtime where the model allows it: the same greedy completions as hf for about 10% less CPU on
    SmolLM2-135M, docs/real_model.md) or ``vllm`` (needs the vllm extra)."""
    device: str = "auto"
    """``auto``, ``cpu``, ``cuda``..."""
    dtype: str = "float32"
    """Model dtype: float32, bfloat16, float16 (the vllm backend runs in it too)."""
    batch_size: int = 16
    """Sequences per ``generate`` call (hf and native backends)."""
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

    env: str | None = None
    """Environment of multi-turn episodes (``code_feedback``, ``python_tool``, any registered name;
    docs/tools.md): each sample is an episode with it, scored on its ``scored_text``, and the results add
    turns used, tool calls, tool errors, timeouts and accuracy within each number of turns. null = one
    completion per sample."""
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    """How an episode runs when ``env`` is set, as training's ``task.episode``: ``episode.max_turns``, the
    token budget ``episode.max_tokens``, the environment's options (``+episode.options.max_failures=2``)."""

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
    graders: list[str] = field(default_factory=list)
    """Grader sensitivity: score the same completions with these graders too and report the accuracy
    under each and where they disagree (``graders=[ours,strict,math_verify]``): ``ours`` is the
    benchmark's verifier, ``strict`` the same with ``strict: true``, any other entry a registered
    verifier name (``benchmarks/graders.py``). Empty: no report."""
    grader_examples: int = 5
    """Disagreeing samples kept as examples in the grader-sensitivity report."""

    output_dir: str = "eval_results"
    """Where results go: ``<output_dir>/<model>/<benchmark>/results.json`` and ``summary.md``."""
    overwrite: bool = False
    """Ignore cached generations and scores, redo everything."""
    progress: bool = True
    """Show tqdm progress bars."""


EVAL_RANGES: dict[str, Range] = {
    "limit": AT_LEAST_1,
    "n": AT_LEAST_1,
    "k": AT_LEAST_1,
    "temperature": AT_LEAST_0,
    "top_p": SHARE,
    "top_k": AT_LEAST_0,
    "max_new_tokens": AT_LEAST_1,
    "num_fewshot": AT_LEAST_0,
    "batch_size": AT_LEAST_1,
    "tensor_parallel_size": AT_LEAST_1,
    "gpu_memory_utilization": SHARE,
    "max_model_len": AT_LEAST_1,
    "generation_chunk": AT_LEAST_1,
    "score_timeout": POSITIVE,
    "score_workers": AT_LEAST_0,
    "grader_examples": AT_LEAST_0,
    "bootstrap": AT_LEAST_1,
    "confidence": SHARE,
    "episode.max_turns": AT_LEAST_1,
    "episode.max_tokens": AT_LEAST_1,
    "episode.retry_groups": FRACTION,
}
"""Allowed range of every numeric setting of ``reasoning-rl-eval``."""

EVAL_FREE: dict[str, str] = {"seed": "any integer seeds the sampling"}
"""Numeric settings of ``reasoning-rl-eval`` any value of is valid, with the reason."""

MODES = ("model_name_or_path", "samples", "run_dir", "write_reference_samples", "compare")
"""The settings that say what to evaluate; exactly one is given."""

BACKENDS = ("auto", "hf", "native", "vllm")


def _benchmark_count(benchmark: Any) -> int:
    """How many benchmarks ``benchmark=`` names (``all`` counts as many)."""
    names = benchmark.split(",") if isinstance(benchmark, str) else [str(b) for b in benchmark or []]
    names = [n.strip() for n in names if n.strip()]
    return 2 if names == ["all"] else len(names)


def validate(cfg: EvalConfig) -> None:
    """Refuse settings that cannot run, naming every bad key in one :class:`ConfigError`."""
    problems = range_problems(cfg, EVAL_RANGES)
    modes = [m for m in MODES if getattr(cfg, m)]
    if len(modes) != 1:
        problems.append("say what to evaluate with exactly one of model=<checkpoint or HF name>, "
                        "samples=<file.jsonl>, run_dir=<training run folder>, write_reference_samples=<folder> or "
                        f"compare=[A,B]; got {', '.join(modes) if modes else 'none'}")
    count = _benchmark_count(cfg.benchmark)
    if cfg.suite is not None:
        problems += _suite_problems(cfg, count)
    elif cfg.compare:
        problems.append("compare= evaluates checkpoints on a suite; add suite=<name> (e.g. suite=math_reasoning)")
    elif count == 0:
        problems.append("benchmark= is empty; name one (benchmark=gsm8k), several (benchmark=[gsm8k,math500]), "
                        "all, or a suite (suite=math_reasoning)")
    if count > 1 and cfg.samples:
        problems.append("samples= holds one benchmark's completions; pass a single benchmark=")
    if count > 1 and cfg.data_files:
        problems.append("data_files= names one file, so it needs a single benchmark; use data_dir= for several")
    if cfg.samples and cfg.suite is None and not Path(cfg.samples).expanduser().is_file():
        problems.append(f"samples={cfg.samples}: no such file (a JSONL of task_id and completion)")
    if cfg.run_dir and not Path(cfg.run_dir).expanduser().is_dir():
        problems.append(f"run_dir={cfg.run_dir}: no such folder (a training run folder holding checkpoint-<step>/)")
    too_large = [k for k in cfg.k if k > cfg.n]
    if too_large and not cfg.samples:  # a samples file brings its own n
        problems.append(f"k={too_large} needs at least k samples per problem, but n={cfg.n}: "
                        f"raise n to {max(too_large)} or drop those k")
    if cfg.tensor_parallel_size > 1 and cfg.backend == "hf":
        problems.append(f"tensor_parallel_size={cfg.tensor_parallel_size} shards the model over GPUs with vLLM, "
                        "which backend=hf cannot do; set backend=vllm (or auto on a GPU machine with the vllm extra) or tensor_parallel_size=1")
    if cfg.env is not None and (cfg.samples or cfg.write_reference_samples):
        problems.append(f"env={cfg.env} runs episodes with a model; samples= and write_reference_samples= "
                        "generate nothing: drop env= or evaluate a model")
    problems += cfg.episode.problems("episode")
    if cfg.episode.retry_groups:
        problems.append(f"episode.retry_groups={cfg.episode.retry_groups} shares first turns between a training "
                        "group's episodes; evaluation runs every episode whole: drop it")
    if cfg.backend not in BACKENDS:
        problems.append(f"backend={cfg.backend!r} is unknown; choose one of {', '.join(BACKENDS)}")
    if problems:
        raise ConfigError(problems_message(problems))


def _suite_problems(cfg: EvalConfig, count: int) -> list[str]:
    problems = []
    if count:
        problems.append("benchmark= and suite= both given; a suite names its benchmarks: pass one of them")
    if cfg.run_dir:
        problems.append("run_dir= with suite= is not supported; compare=[run:<run_dir>] evaluates a run's first and "
                        "last checkpoint on the suite")
    if cfg.compare and len(cfg.compare) < 2 and not str(cfg.compare[0]).startswith("run:"):
        problems.append(f"compare={list(cfg.compare)} needs two checkpoints or hub names (compare=[A,B])")
    if cfg.data_files:
        problems.append("data_files= names one file; a suite reads its members' files from data_dir=")
    return problems


def register_configs() -> None:
    """Make the schema known to Hydra; ``conf/eval.yaml`` extends it through its defaults list."""
    ConfigStore.instance().store(name="eval_schema", node=EvalConfig)
