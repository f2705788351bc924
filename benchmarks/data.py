"""Load a benchmark's rows and turn each into a :class:`Problem` (prompt, reference, verifier fields).

Rows come from ``datasets.load_dataset``: the hub dataset named in the definition
by default, or a local JSON/JSONL file (``data_dir=`` finds the definition's
``local_file`` there; ``data_files=`` names a file directly), or a Python
generator for synthetic tasks. A row that lacks a field the definition needs is
an error naming the row and the field.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.definitions import BenchmarkSpec, DatasetSource
from benchmarks.extractors import EXTRACTORS, ReferenceExtractionError


class DatasetFieldError(KeyError):
    """A dataset row lacks a field the benchmark definition uses."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Problem:
    """One benchmark problem, ready to prompt and score."""

    task_id: str
    prompt: str
    """The question rendered with the benchmark's template (no few-shot, no chat template yet)."""
    reference: Any
    """What the verifier compares against (``verifier(completion, reference, **fields)``)."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Extra verifier keyword arguments (tests, entry point, ...)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Values of the definition's ``breakdown`` fields (subject, level)."""
    row: dict[str, Any] = field(default_factory=dict, repr=False)
    """The dataset row itself, for reference samples."""


def render(template: str, row: dict[str, Any], where: str) -> str:
    """``template.format(**row)`` with list values joined by newlines; a missing field names the row."""
    values = {k: "\n".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in row.items()}
    try:
        return template.format(**values)
    except KeyError as exc:
        raise DatasetFieldError(
            f"{where}: the template needs field {exc.args[0]!r}, which the row lacks "
            f"(row fields: {sorted(row)})"
        ) from None


def _field(row: dict[str, Any], name: str, where: str) -> Any:
    if name not in row or row[name] is None:
        raise DatasetFieldError(f"{where}: missing field {name!r} (row fields: {sorted(row)})")
    return row[name]


def resolve_local_file(source: DatasetSource, data_dir: str | Path | None, data_files: str | None) -> Path | None:
    """The local file to read, if any: ``data_files`` wins, then ``data_dir / source.local_file``."""
    if data_files:
        path = Path(data_files).expanduser()
    elif data_dir:
        if not source.local_file:
            return None  # generated benchmarks have no file
        path = Path(data_dir).expanduser() / source.local_file
    else:
        return None
    if not path.exists():
        raise FileNotFoundError(f"benchmark data file {str(path)!r} does not exist")
    return path


def load_rows(source: DatasetSource, data_dir: str | Path | None = None, data_files: str | None = None,
              split: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """The rows of ``source`` and a description of where they came from (for result files)."""
    if split is not None and not source.generator and resolve_local_file(source, data_dir, data_files) is not None:
        raise ValueError(f"split={split!r} picks a hub split, but a local file is in use; "
                         "pass that split's file with data_files= instead")
    split = split or source.split
    if source.generator:
        module_name, _, fn_name = source.generator.partition(":")
        fn = getattr(importlib.import_module(module_name), fn_name)
        rows = [dict(r) for r in fn(split=split, **source.kwargs)]
        origin = f"{source.generator}({json.dumps({'split': split, **source.kwargs}, sort_keys=True)})"
    else:
        import datasets

        local = resolve_local_file(source, data_dir, data_files)
        if local is not None:
            ds = datasets.load_dataset("json", data_files=str(local), split="train")
            origin = str(local.resolve())
        else:
            if not source.path:
                raise ValueError("this benchmark has no hub dataset; pass data_dir= or data_files=")
            ds = datasets.load_dataset(source.path, source.name, split=split)
            origin = f"hf://{source.path}" + (f"/{source.name}" if source.name else "") + f"[{split}]"
        rows = [dict(r) for r in ds]
    if source.id_range is not None:
        lo, hi = source.id_range
        rows = [r for r in rows if "task_id" in r and lo <= int(r["task_id"]) <= hi]
    return rows, origin


def make_problem(spec: BenchmarkSpec, row: dict[str, Any], index: int) -> Problem:
    """Turn one dataset row into a :class:`Problem` following ``spec``."""
    task_id = str(_field(row, spec.id_field, f"{spec.name} row {index}")) if spec.id_field else f"{spec.name}/{index}"
    where = f"{spec.name} row {index} (id {task_id!r})"
    answer = _field(row, spec.answer_field, where) if spec.answer_field else None
    if spec.answer_extractor and answer is not None:
        try:
            answer = EXTRACTORS[spec.answer_extractor](answer)
        except ReferenceExtractionError as exc:
            raise ValueError(f"{where}: field {spec.answer_field!r}: {exc}") from None
    return Problem(
        task_id=task_id,
        prompt=render(spec.prompt_template, row, where),
        reference=answer,
        fields={kw: _field(row, col, where) for kw, col in spec.verifier.fields.items()},
        meta={col: _field(row, col, where) for col in spec.breakdown},
        row=row,
    )


def load_problems(spec: BenchmarkSpec, data_dir: str | Path | None = None, data_files: str | None = None,
                  split: str | None = None, limit: int | None = None) -> tuple[list[Problem], dict[str, Any]]:
    """The benchmark's problems (the first ``limit`` when given) and a dataset record for result files.

    The record holds where the data came from, the number of problems and a
    fingerprint (sha256 of the problems' ids, prompts and references), so a result
    file tells which data it measured.
    """
    if spec.answer_extractor and spec.answer_extractor not in EXTRACTORS:
        raise ValueError(f"{spec.name}: unknown answer_extractor {spec.answer_extractor!r}; known: {sorted(EXTRACTORS)}")
    rows, origin = load_rows(spec.source, data_dir, data_files, split)
    if limit is not None:
        rows = rows[:limit]
    problems = [make_problem(spec, row, i) for i, row in enumerate(rows)]
    seen: set[str] = set()
    for p in problems:
        if p.task_id in seen:
            raise ValueError(f"{spec.name}: problem id {p.task_id!r} appears twice; check id_field")
        seen.add(p.task_id)
    digest = hashlib.sha256()
    for p in problems:
        digest.update(json.dumps([p.task_id, p.prompt, p.reference], default=str).encode())
    record = {"origin": origin, "split": split or spec.source.split, "num_problems": len(problems),
              "fingerprint": digest.hexdigest()[:16]}
    return problems, record
