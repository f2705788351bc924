"""What ``reasoning-rl-eval`` does with a validated :class:`EvalConfig`.

Four modes, picked by which key is set: ``write_reference_samples`` (write each
benchmark's reference and corrupted samples), ``samples`` (score a file of
completions, no model), ``model`` (generate with one model), ``run_dir`` (every
checkpoint of a training run, then a table and a plot against step). Every
evaluation writes ``<output_dir>/<model>/<benchmark>/results.json`` and the
folder's ``summary.md`` is rebuilt from all the result files under it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.catalog import available, get_benchmark, list_benchmarks, require_data
from benchmarks.config import EvalConfig, validate
from benchmarks.evaluate import ScoringSettings, evaluate
from benchmarks.graders import build_graders, grader_lines
from benchmarks.prompting import resolve_prompting
from benchmarks.sources import EngineSource, read_samples
from benchmarks.summary import breakdown_lines, episode_line, result_line, write_summary
from reasoning_rl.errors import UserError
from reasoning_rl.run_folder import checkpoint as ckpt
from reasoning_rl.tasks.data import Problem, load_problems
from reasoning_rl.tasks.definition import DatasetDefinition
from reasoning_rl.tasks.scoring import grade
from rewards import WorkerPool
from rewards.registry import verifier_code_digest


class CodeExecutionNotAllowed(UserError, RuntimeError):
    """A code benchmark was asked for without ``allow_code_execution=true``."""


class EvalRequestError(UserError, ValueError):
    """An evaluation that cannot be run as asked (what to evaluate, which benchmarks, k against n)."""


def benchmark_names(value: str | Sequence[str]) -> list[str]:
    """``[gsm8k, math500]`` or ``"gsm8k,math500"`` -> ``["gsm8k", "math500"]``; ``"all"`` -> every benchmark."""
    parts = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    names = [n.strip() for n in parts if n.strip()]
    if names == ["all"]:
        return list_benchmarks()
    if not names:
        raise EvalRequestError(f"benchmark= is empty; choose from {', '.join(list_benchmarks())}")
    return names


def select_benchmarks(cfg: EvalConfig) -> list[DatasetDefinition]:
    """The benchmarks of ``benchmark=``, checked before any model loads: ``all`` keeps those whose data
    ``data_dir`` (or the hub) provides and says which it skipped and why; a benchmark named explicitly
    whose data is missing is refused in one line naming the file."""
    names = benchmark_names(cfg.benchmark)
    specs = [get_benchmark(n) for n in names]
    if _says_all(cfg.benchmark):
        specs, skipped = available(specs, cfg.data_dir, cfg.split)
        for name, reason in skipped.items():
            print(f"benchmark=all: skipping {name}: {reason}", file=sys.stderr)
        if not specs:
            raise EvalRequestError(f"benchmark=all: no benchmark's data is available ({len(skipped)} skipped, "
                                   "see above); pass data_dir=<folder with the benchmark files>")
        return specs
    require_data(specs, cfg.data_dir, cfg.data_files, cfg.split)
    return specs


def _says_all(value: str | Sequence[str]) -> bool:
    parts = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [p.strip() for p in parts if p.strip()] == ["all"]


def check_code_execution(specs: Sequence[DatasetDefinition], allowed: bool) -> None:
    """Refuse code benchmarks unless the user opted in: they run programs a model wrote."""
    code = [s.name for s in specs if s.requires_code_execution]
    if code and not allowed:
        raise CodeExecutionNotAllowed(
            f"benchmark(s) {', '.join(code)} execute model-written Python programs (in the code verifier's "
            "sandbox, see docs/code_sandbox.md for what it isolates and what it does not). "
            "Re-run with allow_code_execution=true to accept that."
        )


def slug(text: str) -> str:
    """A folder name for a model or samples file: ``Qwen/Qwen2.5-0.5B`` -> ``Qwen--Qwen2.5-0.5B``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "--", text.strip("/")).strip("-") or "model"


def model_slug(model: str) -> str:
    """Checkpoint folders are named ``<run>--checkpoint-<step>``; hub names keep their owner."""
    path = Path(model).expanduser()
    if path.exists():
        path = path.resolve()
        return slug(f"{path.parent.name}/{path.name}") if path.name.startswith("checkpoint-") else slug(path.name)
    return slug(model)


def make_verifier(spec: DatasetDefinition, overrides: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The benchmark's verifier (built as training builds it) and the data that identifies its scores
    (the score cache key: a change to the verifier's options or code re-scores the cached completions)."""
    options = {**spec.verifier.options, **overrides}
    verifier = spec.verifier.build(overrides)
    key = {"benchmark": spec.key, "verifier": spec.verifier.name, "options": options,
           "fields": spec.verifier.fields, "code": verifier_code_digest(spec.verifier.name)}
    return verifier, key


def make_equivalence(verifier: Any, timeout: float, pool: Any) -> Callable[[list[tuple[str, str]]], set]:
    """Pairs of extracted answers -> those the verifier calls equal (``\\boxed{b}`` scored against ``a``)."""

    def equivalence(pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
        if not pairs:
            return set()
        graded = grade(verifier, [f"\\boxed{{{b}}}" for _, b in pairs], [a for a, _ in pairs],
                       timeout=timeout, pool=pool)
        return {pair for pair, correct in zip(pairs, graded.correct) if correct}

    return equivalence


class Evaluator:
    """Holds what is shared between the benchmarks and checkpoints of one invocation."""

    def __init__(self, cfg: EvalConfig, pool: Any = None) -> None:
        self.cfg = cfg
        self.pool = pool
        """Scoring worker pool (shared by the members of a suite); made here when ``score_workers`` is set."""
        if pool is None and cfg.score_workers is not None:
            self.pool = WorkerPool(cfg.score_workers)
        self._problems: dict[tuple[str, str], tuple[list[Problem], dict[str, Any]]] = {}

    def problems(self, spec: DatasetDefinition) -> tuple[list[Problem], dict[str, Any]]:
        key = (spec.name, spec.prompt_template)  # a checkpoint's own prompt template renders other prompts
        if key not in self._problems:
            self._problems[key] = load_problems(spec, self.cfg.split, data_dir=self.cfg.data_dir,
                                                data_file=self.cfg.data_files, limit=self.cfg.limit)
        return self._problems[key]

    def header(self, model: dict[str, Any], dataset: dict[str, Any]) -> dict[str, Any]:
        import reasoning_rl

        return {"model": model, "dataset": dataset, "config": dataclasses.asdict(self.cfg),
                "reasoning_rl_version": reasoning_rl.__version__}

    def scoring(self, spec: DatasetDefinition) -> tuple[ScoringSettings, Callable | None]:
        verifier, key = make_verifier(spec, dict(self.cfg.verifier_options))
        timeout = self.cfg.score_timeout or spec.score_timeout
        graders = build_graders(self.cfg.graders, spec, dict(self.cfg.verifier_options)) if self.cfg.graders else []
        settings = ScoringSettings(verifier=verifier, key_data=key, timeout=timeout, pool=self.pool, graders=graders,
                                   grader_examples=self.cfg.grader_examples)
        equivalence = make_equivalence(verifier, timeout, self.pool) if self.cfg.maj_equivalence else None
        return settings, equivalence

    def run_samples(self, spec: DatasetDefinition, samples: str, out: Path | None = None) -> dict[str, Any]:
        problems, dataset = self.problems(spec)
        scoring, equivalence = self.scoring(spec)
        out = out or Path(self.cfg.output_dir) / slug(f"samples--{Path(samples).stem}") / spec.name
        return evaluate(spec, problems, read_samples(samples, problems), scoring, out, k_values=self.cfg.k,
                        overwrite=self.cfg.overwrite, answer_equivalence=equivalence,
                        header=self.header({"samples": str(Path(samples).resolve())}, dataset),
                        show_progress=self.cfg.progress)

    def run_model(self, spec: DatasetDefinition, engine: Any, tokenizer: Any, model: str, out: Path,
                  step: int | None = None) -> dict[str, Any]:
        from benchmarks.generation import resolve_backend, sampling_config
        from reasoning_rl.tasks.prompts import build_prompt, fewshot_pairs

        cfg = self.cfg
        prompting = resolve_prompting(cfg, tokenizer, spec, model)
        print(f"prompting {spec.name} for {model}: {prompting.describe()}")
        if prompting.prompt_template is not None:
            spec = dataclasses.replace(spec, prompt_template=prompting.prompt_template)
        use_chat, system_prompt = prompting.chat_template, prompting.system_prompt
        problems, dataset = self.problems(spec)
        scoring, equivalence = self.scoring(spec)
        shots = fewshot_pairs(spec, cfg.num_fewshot, cfg.data_dir)
        sampling = sampling_config(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens,
                                   () if use_chat else spec.stop)
        for note in prompting.generation_notes(cfg.max_new_tokens, sampling.stop):
            print(f"note: {note}")
        settings = {"model": str(model), "benchmark": spec.key, "n": cfg.n, "sampling": dataclasses.asdict(sampling),
                    "chat_template": use_chat, "system_prompt": system_prompt, "num_fewshot": cfg.num_fewshot,
                    "seed": cfg.seed, "backend": resolve_backend(cfg.backend, cfg.device),
                    **({"prompt_template": prompting.prompt_template} if prompting.prompt_template else {}),
                    **({"env": cfg.env, "episode": dataclasses.asdict(cfg.episode)} if cfg.env else {})}
        source = EngineSource(
            engine=engine, sampling=sampling, n=cfg.n, seed=cfg.seed, settings=settings,
            build_prompt=lambda p: build_prompt(p.prompt, shots, tokenizer, use_chat, system_prompt),
            env=cfg.env, episode=cfg.episode, tokenizer=tokenizer,
        )
        model_info = {"name_or_path": str(model), "step": step, "generation": settings,
                      "prompting_sources": prompting.sources}
        return evaluate(spec, problems, source, scoring, out, k_values=cfg.k, generation_chunk=cfg.generation_chunk,
                        overwrite=cfg.overwrite, answer_equivalence=equivalence,
                        header=self.header(model_info, dataset), show_progress=cfg.progress)


def vllm_settings(cfg: EvalConfig) -> dict[str, Any]:
    """The vLLM engine settings of ``cfg`` (checked by ``benchmarks.generation.vllm_options``)."""
    return {"tensor_parallel_size": cfg.tensor_parallel_size, "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "max_model_len": cfg.max_model_len}


def run(cfg: EvalConfig) -> list[dict[str, Any]]:
    """Run the invocation described by ``cfg``; return the results dicts (empty when only writing samples).
    The settings are checked first (:func:`benchmarks.config.validate`: one mode, k <= n, ...)."""
    validate(cfg)
    specs = select_benchmarks(cfg)
    evaluator = Evaluator(cfg)

    if cfg.write_reference_samples:
        from benchmarks.samples import write_reference_samples

        for spec in specs:
            problems, _ = evaluator.problems(spec)
            for path in write_reference_samples(spec, problems, cfg.write_reference_samples):
                print(f"wrote {path} ({len(problems)} problems)")
        return []

    check_code_execution(specs, cfg.allow_code_execution)
    for spec in specs if cfg.graders else []:  # a grader that cannot be built fails before any generation
        build_graders(cfg.graders, spec, dict(cfg.verifier_options))
    results: list[dict[str, Any]] = []
    if cfg.samples:
        results.append(evaluator.run_samples(specs[0], cfg.samples))
    elif cfg.model_name_or_path:
        from benchmarks.generation import load_engine

        check_model_folder(cfg.model_name_or_path)
        engine, tokenizer = load_engine(cfg.backend, cfg.model_name_or_path, cfg.device, cfg.dtype, cfg.batch_size,
                                        cfg.seed, vllm=vllm_settings(cfg))
        out = Path(cfg.output_dir) / model_slug(cfg.model_name_or_path)
        results += [evaluator.run_model(spec, engine, tokenizer, cfg.model_name_or_path, out / spec.name) for spec in specs]
    else:
        results += run_sweep(evaluator, specs)
    for r in results:
        print(result_line(r))
        if episode_line(r):
            print(episode_line(r))
        for line in breakdown_lines(r):
            print(line)
        if "grader_sensitivity" in r:
            print("\n".join(grader_lines(r["benchmark"]["name"], r["grader_sensitivity"])))
    summary = write_summary(cfg.output_dir)
    print(f"summary: {summary}")
    return results


def run_sweep(evaluator: Evaluator, specs: Sequence[DatasetDefinition]) -> list[dict[str, Any]]:
    """Evaluate every checkpoint of ``cfg.run_dir`` on every benchmark; write sweep tables and plots."""
    from benchmarks.generation import load_engine
    from benchmarks.sweep import find_checkpoints, write_sweep

    cfg = evaluator.cfg
    run_dir = Path(cfg.run_dir).expanduser().resolve()
    out = Path(cfg.output_dir) / slug(run_dir.name)
    rows: dict[str, list[dict[str, Any]]] = {s.name: [] for s in specs}
    results = []
    checkpoints = find_checkpoints(run_dir)
    intact = [(step, folder) for step, folder in checkpoints if _usable(folder)]
    if not intact:
        raise ckpt.CheckpointError(f"every checkpoint of {str(run_dir)!r} is corrupt (see the lines above); "
                                   "nothing to evaluate")
    for step, folder in intact:
        engine, tokenizer = load_engine(cfg.backend, str(folder), cfg.device, cfg.dtype, cfg.batch_size, cfg.seed,
                                        vllm=vllm_settings(cfg))
        for spec in specs:
            r = evaluator.run_model(spec, engine, tokenizer, str(folder), out / folder.name / spec.name, step=step)
            rows[spec.name].append({"step": step, "checkpoint": folder.name, "metrics": r["metrics"]})
            results.append(r)
        del engine
    for spec in specs:
        paths = write_sweep(out, spec.name, rows[spec.name])
        print(f"sweep {spec.name}: {paths['table']} {paths['plot']}")
        print(Path(paths["table"]).read_text())
    return results


def check_model_folder(model: str) -> None:
    """A local model folder must be intact (:func:`reasoning_rl.run_folder.checkpoint.check_checkpoint`: its manifest,
    or the structural checks of a plain folder) before anything is loaded; hub names pass through."""
    from reasoning_rl.policy.loading import local_model_path

    try:
        folder = local_model_path(model)
    except FileNotFoundError as exc:  # a path-like name that does not exist: one line naming it
        raise ckpt.CheckpointNotFoundError(str(exc)) from exc
    if folder is not None:
        ckpt.check_checkpoint(folder, what="model folder")


def _usable(folder: Path) -> bool:
    """In a sweep a corrupt checkpoint is left out with a line saying which and why."""
    problem = ckpt.checkpoint_problem(folder)
    if problem is not None:
        print(f"skipping {folder}: corrupt ({problem})", file=sys.stderr)
    return problem is None
