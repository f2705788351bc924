"""``reasoning-rl-eval suite=<name or file>``: every member of a suite, one table.

    reasoning-rl-eval suite=math_reasoning model=<checkpoint or hub name> data_dir=../shared/data
    reasoning-rl-eval suite=grade_school compare=[<checkpoint A>,<checkpoint B>] data_dir=../shared/data
    reasoning-rl-eval suite=math_reasoning compare=[run:<training run>] data_dir=../shared/data
    reasoning-rl-eval suite=grade_school samples=refs/*.reference.jsonl data_dir=../shared/data

Before any model loads, every member's data file, the code opt-in, the graders and (with ``samples=``)
every member's samples file are checked. Then each model (one, or each of ``compare=``) runs every
member with the member's own setting (:class:`benchmarks.suite.SuiteMember`), through the same
:class:`benchmarks.runner.Evaluator` as ``benchmark=``: its completions are cached per problem in
``<output_dir>/<model>/<benchmark>/problems.jsonl``, so a killed suite run again continues where it
stopped and generates no sample twice. After each member the table is rewritten
(``<output_dir>/<model>/suite-<name>.{md,csv,tex,json}``, partial until the last member), then the
pass@k spectrum (``passk-<name>.png``) and, with ``graders=``, ``graders-<name>.*``. With ``compare=``
the paired table and one spectrum with a curve per model go to
``<output_dir>/compare-<name>--<A>--<B>/``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.catalog import get_benchmark, require_data
from benchmarks.config import EvalConfig, validate
from benchmarks.graders import build_graders
from benchmarks.passk import spectrum, write_spectrum_png
from benchmarks.runner import (
    Evaluator,
    check_code_execution,
    check_model_folder,
    model_slug,
    slug,
    vllm_settings,
)
from benchmarks.samples import write_reference_samples
from benchmarks.suite import Suite, SuiteMember, load_suite
from benchmarks.suite_table import compare_table, grader_table, score_table, verdicts
from benchmarks.summary import result_line, write_summary
from benchmarks.sweep import find_checkpoints
from benchmarks.table import write_table
from reasoning_rl.errors import UserError
from reasoning_rl.tasks.definition import DatasetDefinition
from rewards import WorkerPool

RUN_PREFIX = "run:"


class SuiteSamplesMissing(UserError, FileNotFoundError):
    """``samples=`` with a suite lacks the samples of a member."""


def member_config(member: SuiteMember, cfg: EvalConfig, **mode: Any) -> EvalConfig:
    """The single-benchmark config of one member: the suite keys dropped, the member's settings and
    the mode (``model_name_or_path=`` or ``samples=``) set. Checked like a ``benchmark=`` invocation."""
    base = dataclasses.replace(cfg, suite=None, compare=[], model_name_or_path=None, samples=None,
                               write_reference_samples=None)
    config = dataclasses.replace(member.config(base), **mode)
    validate(config)
    return config


def samples_paths(pattern: str, specs: Sequence[DatasetDefinition], suite: Suite) -> dict[str, str]:
    """Each member's samples file: ``<folder>/<benchmark>.jsonl`` for a folder, else ``pattern`` with ``*``
    replaced by the benchmark's name (``refs/*.reference.jsonl``). A missing one is one line naming the
    benchmark and the path looked for."""
    folder = Path(pattern).expanduser()
    paths = {}
    for spec in specs:
        if folder.is_dir():
            path = folder / f"{spec.name}.jsonl"
        elif "*" in pattern:
            path = Path(pattern.replace("*", spec.name)).expanduser()
        else:
            raise SuiteSamplesMissing(f"samples={pattern}: with suite={suite.name} give a folder of <benchmark>.jsonl "
                                      "files or a path with * for the benchmark's name (samples=refs/*.reference.jsonl)")
        if not path.is_file():
            raise SuiteSamplesMissing(f"samples for suite {suite.name}: benchmark {spec.name} has no samples file "
                                      f"({path} does not exist); write it or drop {spec.name} from a copy of the suite")
        paths[spec.name] = str(path)
    return paths


def compare_models(compare: Sequence[str]) -> list[str]:
    """``compare=`` as model names; ``run:<run_dir>`` stands for the run's first and last checkpoint."""
    models: list[str] = []
    for entry in compare:
        if entry.startswith(RUN_PREFIX):
            checkpoints = find_checkpoints(Path(entry[len(RUN_PREFIX):]).expanduser().resolve())
            models += [str(checkpoints[0][1]), str(checkpoints[-1][1])]
        else:
            models.append(entry)
    return list(dict.fromkeys(models))


def run_suite(cfg: EvalConfig) -> list[dict[str, Any]]:
    """Run ``cfg.suite`` for the model, the samples or each model of ``compare=``; write the tables; return
    every member's results dict."""
    validate(cfg)
    suite = load_suite(cfg.suite)
    specs = [get_benchmark(m.benchmark) for m in suite.members]
    require_data(specs, cfg.data_dir, None, cfg.split)
    if cfg.write_reference_samples:
        return _write_reference_samples(cfg, specs)
    check_code_execution(specs, cfg.allow_code_execution)
    for spec in specs if cfg.graders else []:
        build_graders(cfg.graders, spec, dict(cfg.verifier_options))
    pool = WorkerPool(cfg.score_workers) if cfg.score_workers is not None else None
    out = Path(cfg.output_dir)
    by_label: dict[str, list[dict[str, Any]]] = {}
    folders: dict[str, Path] = {}
    if cfg.samples:
        paths = samples_paths(cfg.samples, specs, suite)
        configs = [member_config(m, cfg, samples=paths[s.name]) for m, s in zip(suite.members, specs)]
        label = f"samples:{cfg.samples}"
        folders[label] = out / slug(f"samples--{suite.name}")
        by_label[label] = _run_members(suite, specs, configs, folders[label], label, cfg, partial(_score_samples, pool))
    else:
        from benchmarks.generation import load_engine

        models = compare_models(cfg.compare) if cfg.compare else [cfg.model_name_or_path]
        configs_by_model = {m: [member_config(mem, cfg, model_name_or_path=m) for mem in suite.members] for m in models}
        for model in models:  # every folder checked before the first one loads
            check_model_folder(model)
        for model in models:
            engine, tokenizer = load_engine(cfg.backend, model, cfg.device, cfg.dtype, cfg.batch_size, cfg.seed,
                                            vllm=vllm_settings(cfg))
            folders[model] = out / model_slug(model)
            by_label[model] = _run_members(suite, specs, configs_by_model[model], folders[model], model, cfg,
                                           partial(_generate, pool, engine, tokenizer))
            del engine
    if len(by_label) > 1:
        _write_comparison(suite, by_label, out / slug(f"compare-{suite.name}--" + "--".join(
            folders[label].name for label in by_label)), cfg)
    print(f"summary: {write_summary(cfg.output_dir)}")
    return [r for results in by_label.values() for r in results]


def _score_samples(pool: Any, config: EvalConfig, spec: DatasetDefinition, folder: Path) -> dict[str, Any]:
    return Evaluator(config, pool).run_samples(spec, config.samples, folder)


def _generate(pool: Any, engine: Any, tokenizer: Any, config: EvalConfig, spec: DatasetDefinition,
              folder: Path) -> dict[str, Any]:
    return Evaluator(config, pool).run_model(spec, engine, tokenizer, config.model_name_or_path, folder)


def _run_members(suite: Suite, specs: Sequence[DatasetDefinition], configs: Sequence[EvalConfig], folder: Path,
                 label: str, cfg: EvalConfig, evaluate_one: Callable[[EvalConfig, DatasetDefinition, Path], dict]
                 ) -> list[dict[str, Any]]:
    """Every member in order, the table rewritten after each; then the spectrum and grader tables."""
    done: list[dict[str, Any]] = []
    base = folder / f"suite-{suite.name}"
    for spec, config in zip(specs, configs):
        result = evaluate_one(config, spec, folder / spec.name)
        done.append(result)
        print(result_line(result))
        table = score_table(suite.name, label, done, len(specs), cfg.bootstrap, cfg.confidence, cfg.seed)
        paths = write_table(base, table)
        print(f"suite {suite.name}: {len(done)}/{len(specs)} benchmarks, table {paths[0]}")
    print(Path(paths[0]).read_text(encoding="utf-8"))
    curves = {r["benchmark"]["name"]: {label: spectrum(verdicts(r))} for r in done}
    png = write_spectrum_png(folder / f"passk-{suite.name}.png", curves)
    if png is not None:
        print(f"pass@k spectrum: {png}")
    graders = grader_table(suite.name, label, done)
    if graders is not None:
        print(f"grader sensitivity: {write_table(folder / f'graders-{suite.name}', graders)[0]}")
    return done


def _write_comparison(suite: Suite, by_label: dict[str, list[dict[str, Any]]], folder: Path, cfg: EvalConfig) -> None:
    table = compare_table(suite.name, by_label, cfg.bootstrap, cfg.confidence, cfg.seed)
    paths = write_table(folder / f"compare-{suite.name}", table)
    print(Path(paths[0]).read_text(encoding="utf-8"))
    print(f"comparison: {', '.join(str(p) for p in paths)}")
    curves: dict[str, dict[str, list[float]]] = {}
    for label, results in by_label.items():
        for r in results:
            curves.setdefault(r["benchmark"]["name"], {})[label] = spectrum(verdicts(r))
    png = write_spectrum_png(folder / f"passk-{suite.name}.png", curves)
    if png is not None:
        print(f"pass@k spectrum, one curve per model: {png}")


def _write_reference_samples(cfg: EvalConfig, specs: Sequence[DatasetDefinition]) -> list[dict[str, Any]]:
    for spec in specs:
        problems, _ = Evaluator(cfg).problems(spec)
        for path in write_reference_samples(spec, problems, cfg.write_reference_samples):
            print(f"wrote {path} ({len(problems)} problems)")
    return []
