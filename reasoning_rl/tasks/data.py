"""Load a split of a dataset definition and turn each row into a :class:`Problem`.

Training (:meth:`reasoning_rl.tasks.Task.examples`) and evaluation
(``reasoning-rl-eval``) both call :func:`load_problems`, so a problem has the same
prompt, reference and verifier fields in both.

A split's rows come from its source in the definition: the hub dataset by default
(``datasets.load_dataset``), a local file (``data_dir`` finds the split's
``local_file`` there; ``data_file`` names one directly), or a generator. A split
without a local file of its own is never read from another split's file: that is
how training on MATH could end up on MATH test, of which MATH-500 is a subset. A row
that lacks a field the definition needs (or holds null there) is an error naming the row,
the field and the fields the row has. A local file that cannot be read as rows (a line that
is not JSON, a byte that is not UTF-8, an empty file) is an error naming the file, the line
and what is wrong, checked before ``datasets`` reads it (whose own errors name neither).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reasoning_rl.errors import UserError
from reasoning_rl.hub import first_line, hub_unreachable
from reasoning_rl.tasks.definition import DatasetDefinition, DatasetSource
from reasoning_rl.tasks.extractors import EXTRACTORS, ReferenceExtractionError
from reasoning_rl.tasks.synthetic import hash_bucket


class TaskDataError(UserError, ValueError):
    """A dataset source, file or row does not fit its definition."""


class DatasetFieldError(TaskDataError):
    """A dataset row lacks a field the definition uses."""


class DataFileNotFoundError(TaskDataError, FileNotFoundError):
    """A local dataset file that does not exist."""


@dataclass(frozen=True)
class Problem:
    """One problem of a split, ready to prompt and score."""

    task_id: str
    prompt: str
    """The question rendered with the definition's template (no few-shot, no chat template yet)."""
    reference: Any
    """What the verifier compares against (``verifier(completion, reference, **fields)``)."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Extra verifier keyword arguments (tests, entry point, ...)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Values of the definition's ``breakdown`` fields (subject, level)."""
    row: dict[str, Any] = field(default_factory=dict, repr=False)
    """The dataset row itself, for reference samples."""


def _fields_held(row: dict[str, Any]) -> list[str]:
    """The fields of ``row`` that hold a value. A file's rows share one schema (``datasets``), so
    a field that some row lacks is there as null in that row: it is not one the row has."""
    return sorted(k for k, v in row.items() if v is not None)


def render(template: str, row: dict[str, Any], where: str) -> str:
    """``template.format(**row)`` with list values joined by newlines; a missing (or null) field
    names the row and the fields it has (a prompt never reads "None")."""
    wanted = [re.split(r"[.\[]", name)[0] for _, name, _, _ in string.Formatter().parse(template) if name]
    missing = sorted({name for name in wanted if row.get(name) is None})
    if missing:
        needs = ", ".join(f"field {name!r}" for name in missing)
        raise DatasetFieldError(f"{where} has no field(s) {missing}: the template needs {needs} "
                                f"(the row has: {_fields_held(row)})")
    values = {k: "\n".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in row.items()}
    return template.format(**values)


def field_value(row: dict[str, Any], name: str, where: str) -> Any:
    """``row[name]``; a missing (or null) field is a :class:`DatasetFieldError` naming the row and
    the fields it has."""
    if row.get(name) is None:
        raise DatasetFieldError(f"{where}: missing field {name!r} (the row has: {_fields_held(row)})")
    return row[name]


LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
"""Suffix of a local dataset file -> the ``datasets`` builder that reads it."""


def load_local_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a local JSON, JSONL or Parquet file (through ``datasets`` so types match the hub).

    A JSON or JSONL file is checked first (:func:`check_json_rows`), so a malformed line, a byte
    that is not UTF-8 or an empty file is a :class:`TaskDataError` naming the file and the line;
    what ``datasets`` still refuses (a Parquet file that is not one, a field that is a number in
    one row and text in another) is one naming the file with the reader's own message.
    """
    import datasets

    p = Path(path).expanduser()
    if not p.exists():
        raise DataFileNotFoundError(f"dataset file {str(p)!r} does not exist: check the path "
                                    "(task.data_dir / task.data_files in training, data_dir= / data_files= in evaluation)")
    kind = LOCAL_FORMATS.get(p.suffix)
    if kind is None:
        raise TaskDataError(f"unsupported dataset file {str(p)!r}: use .json, .jsonl or .parquet")
    if kind == "json":
        check_json_rows(p)
    try:
        table = datasets.load_dataset(kind, data_files=str(p), split="train")
    except Exception as exc:  # re-raised naming the file; the reader's error stays attached
        raise TaskDataError(f"{p}: cannot read it as {'JSON' if kind == 'json' else 'Parquet'} rows "
                            f"({first_line(exc)}); fix the file or write it again") from exc
    if len(table) == 0:
        raise TaskDataError(f"{p} holds no rows: give a file with at least one row")
    return [dict(r) for r in table]


def check_json_rows(path: Path) -> None:
    """Raise a :class:`TaskDataError` naming ``path``, the line and what is wrong unless the file
    holds rows: JSON Lines (one object a line; blank lines are skipped) or, for ``.json``, one JSON
    array of objects (or one object: a single row). The text must be UTF-8, as JSON requires."""
    data = path.read_bytes()
    if not data.strip():
        raise TaskDataError(f"{path} is empty: it should hold one JSON object (one row) a line; check the "
                            "path, or write the file again")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise TaskDataError(f"{path}, line {line}: byte 0x{data[exc.start]:02x} at column {column} is not UTF-8; "
                            "save the file as UTF-8 (the encoding JSON requires)") from None
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskDataError(f"{path}, line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno}); "
                                "a .json dataset file holds one array of row objects, or one object a line") from None
        if not rows:
            raise TaskDataError(f"{path} holds no rows (an empty array): give a file with at least one row")
        bad = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
        if bad is not None:
            raise TaskDataError(f"{path}: item {bad} of the array is {_json_kind(rows[bad])}, not an object; "
                                "each item must be one row: an object of field: value")
        return
    if path.suffix == ".json":
        try:
            if isinstance(json.loads(text), dict):
                return  # one object: a single row
        except json.JSONDecodeError:
            pass  # not one JSON document: JSON Lines, checked line by line
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskDataError(f"{path}, line {number}: not valid JSON ({exc.msg} at column {exc.colno}); "
                                "each line must hold one JSON object (one row): fix or remove the line") from None
        if not isinstance(row, dict):
            raise TaskDataError(f"{path}, line {number}: {_json_kind(row)}, not an object; each line must hold "
                                "one JSON object (one row)")


def _json_kind(value: Any) -> str:
    kinds = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
    return kinds.get(type(value), "a number")


def _describe(definition: DatasetDefinition, split: str) -> str:
    source = definition.splits[split]
    return f"split {split!r}" + (f" ({source.description})" if source.description else "")


def _hub_name(source: DatasetSource) -> str:
    return f"{source.path}" + (f"/{source.name}" if source.name else "") + f"[{source.split}]"


def local_path(definition: DatasetDefinition, split: str, data_dir: str | Path | None,
               data_file: str | Path | None) -> Path | None:
    """The local file holding ``split``, if any: ``data_file`` wins, then ``data_dir / local_file``.

    With ``data_dir`` set, a split that names no local file of its own is an error
    (never another split's file in its place); a generated split needs no file.
    """
    source = definition.source(split)
    if data_file:
        return Path(data_file).expanduser()
    if not data_dir or source.generator:
        return None
    if source.local_file:
        return Path(data_dir).expanduser() / source.local_file
    others = [f"{s.local_file}: {_describe(definition, name)}" for name, s in definition.splits.items()
              if s.local_file and name != split]
    raise TaskDataError(
        f"{definition.name!r} {_describe(definition, split)} has no local copy: data_dir={str(data_dir)!r} is set, "
        "but the definition names no local file for this split."
        + (f" Its local files hold other splits ({'; '.join(others)}), and one split never stands in for "
           "another: training on problems that evaluation measures makes the held-out numbers meaningless."
           if others else "")
        + f" Load it from the hub ({_hub_name(source)}: leave data_dir unset) or pass a local copy: "
        f"+task.data_files.{split}=<file> in training, data_files=<file> split={split} in evaluation."
    )


def load_rows(definition: DatasetDefinition, split: str, *, data_dir: str | Path | None = None,
              data_file: str | Path | None = None,
              source_kwargs: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], str]:
    """The rows of ``split`` and a description of where they came from (for result files).

    ``source_kwargs`` override the generator's keyword arguments (``max_operand`` of the
    arithmetic task); they are refused for a dataset that is not generated. A generator that takes a
    ``data_dir`` argument (rows derived from files, ``gsm8k_tool``) gets ``data_dir`` there unless
    ``source_kwargs`` set it.
    """
    source: DatasetSource = definition.source(split)
    kwargs = {**source.kwargs, **(source_kwargs or {})}
    if source_kwargs and not source.generator:
        raise TaskDataError(f"{definition.name!r} is not generated: source_kwargs {sorted(source_kwargs)} "
                            "apply to a `generator:` source only")
    local = local_path(definition, split, data_dir, data_file)
    if local is not None:
        rows = load_local_rows(local)
        origin = str(local.resolve())
    elif source.generator:
        module_name, _, fn_name = source.generator.partition(":")
        fn = getattr(importlib.import_module(module_name), fn_name)
        if data_dir and "data_dir" in inspect.signature(fn).parameters:
            kwargs.setdefault("data_dir", str(data_dir))  # a generator over files (gsm8k_tool): the run's folder
        rows = [dict(r) for r in fn(split=source.split, **kwargs)]
        origin = f"{source.generator}({json.dumps({'split': source.split, **kwargs}, sort_keys=True)})"
    elif source.path:
        rows = _hub_rows(definition, split, source)
        origin = f"hf://{_hub_name(source)}"
    else:
        raise TaskDataError(f"{definition.name!r} {_describe(definition, split)} is a local file only "
                            f"({source.local_file}): pass data_dir=<folder holding it> or a data file")
    if source.id_range is not None:
        lo, hi = source.id_range
        rows = [r for i, r in enumerate(rows)
                if lo <= int(field_value(r, definition.id_field, f"{definition.name} row {i}")) <= hi]
    if source.hash_range is not None:
        lo, hi = source.hash_range
        where = f"{definition.name} {_describe(definition, split)}"
        rows = [r for i, r in enumerate(rows)
                if lo <= hash_bucket(render(definition.prompt_template, r, f"{where} row {i}")) < hi]
    return rows, origin


def _hub_rows(definition: DatasetDefinition, split: str, source: DatasetSource) -> list[dict[str, Any]]:
    import datasets

    try:
        ds = datasets.load_dataset(source.path, source.name, split=source.split)
    except Exception as exc:  # re-raised as one line saying what to do; the cause stays attached
        local = f"<folder holding {source.local_file}>" if source.local_file else "<folder>"
        fix = (f"pass data_dir={local} or data_files=<file> (training: task.data_dir=, "
               f"+task.data_files.{split}=<file>)")
        if hub_unreachable(exc):
            raise TaskDataError(f"cannot reach the hub for {_hub_name(source)}: {fix}") from exc
        raise TaskDataError(f"{definition.name!r} {_describe(definition, split)}: could not load "
                            f"{_hub_name(source)} from the hub ({first_line(exc)}); {fix}") from exc
    return [dict(r) for r in ds]


def make_problem(definition: DatasetDefinition, row: dict[str, Any], index: int,
                 origin: str | None = None) -> Problem:
    """Turn one dataset row into a :class:`Problem` following ``definition``; errors name the row
    (its index among the split's rows, and ``origin``, where the rows came from, when given)."""
    d = definition
    of = f" of {origin}" if origin else ""
    task_id = str(field_value(row, d.id_field, f"{d.name} row {index}{of}")) if d.id_field else f"{d.name}/{index}"
    where = f"{d.name} row {index} (id {task_id!r}){of}"
    answer = field_value(row, d.answer_field, where) if d.answer_field else None
    if d.answer_extractor and answer is not None:
        try:
            answer = EXTRACTORS[d.answer_extractor](answer)
        except ReferenceExtractionError as exc:
            raise TaskDataError(f"{where}: field {d.answer_field!r}: {exc}") from None
    return Problem(
        task_id=task_id,
        prompt=render(d.prompt_template, row, f"{d.name} row {index}{of}"),
        reference=answer,
        fields={kw: field_value(row, col, where) for kw, col in d.verifier.fields.items()},
        meta={col: field_value(row, col, where) for col in d.breakdown},
        row=row,
    )


def load_problems(definition: DatasetDefinition, split: str | None = None, *, data_dir: str | Path | None = None,
                  data_file: str | Path | None = None, source_kwargs: dict[str, Any] | None = None,
                  limit: int | None = None, unique_ids: bool = True) -> tuple[list[Problem], dict[str, Any]]:
    """The problems of ``split`` (default: the evaluation split), the first ``limit`` when given,
    and a dataset record for result files.

    The record holds where the data came from, the number of problems and a
    fingerprint (sha256 of the problems' ids, prompts and references), so a result
    file tells which data it measured. Problem ids must be unique (they key caches and
    samples files); ``unique_ids=False`` lets training rows repeat a problem (a
    generator that cycles its pool).
    """
    split = split or definition.eval_split
    if split is None:
        raise TaskDataError(f"{definition.name!r} names no evaluation split; ask for one of {list(definition.splits)}")
    rows, origin = load_rows(definition, split, data_dir=data_dir, data_file=data_file, source_kwargs=source_kwargs)
    if limit is not None:
        rows = rows[:limit]
    problems = [make_problem(definition, row, i, origin) for i, row in enumerate(rows)]
    if unique_ids:
        seen: set[str] = set()
        for p in problems:
            if p.task_id in seen:
                raise TaskDataError(f"{definition.name}: problem id {p.task_id!r} appears twice; check id_field")
            seen.add(p.task_id)
    digest = hashlib.sha256()
    for p in problems:
        digest.update(json.dumps([p.task_id, p.prompt, p.reference], default=str).encode())
    record = {"origin": origin, "split": split, "num_problems": len(problems), "fingerprint": digest.hexdigest()[:16]}
    return problems, record
