"""Which benchmarks exist, and which of them the given data can provide.

A benchmark is a dataset definition (:mod:`reasoning_rl.tasks.definition`): the ones training
also uses live in ``reasoning_rl/tasks/definitions/``, the evaluation-only sets of the standard
math reasoning table (AIME 2025, AMC 2023, Minerva Math, OlympiadBench, College Math, SVAMP,
ASDiv, MAWPS) in ``benchmarks/definitions/``. :func:`get_benchmark` looks in both (a name used
twice is an error), or reads a definition YAML given by path.

:func:`missing_data` says, before any model loads, why a benchmark's evaluated split cannot be
read from ``data_dir`` (its local file is not there, or it is a local-file-only set and no
``data_dir`` was given); ``benchmark=all`` skips those and says so, a benchmark named explicitly
is refused.
"""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path

from reasoning_rl.errors import UserError
from reasoning_rl.tasks.data import TaskDataError, local_path
from reasoning_rl.tasks.definition import (
    DatasetDefinition,
    DefinitionError,
    get_definition,
    list_definitions,
    load_definition_file,
)

DEFINITIONS_DIR = Path(__file__).parent / "definitions"
"""The evaluation-only dataset definitions shipped with the benchmarks."""


class UnknownBenchmarkError(UserError, KeyError):
    """A ``benchmark=`` name that is neither shipped nor a definition file."""


class BenchmarkDataMissing(UserError, FileNotFoundError):
    """A benchmark named explicitly whose data ``data_dir`` (or the hub) cannot provide."""


@cache
def _eval_only() -> dict[str, DatasetDefinition]:
    specs = {}
    shared = set(list_definitions())
    for path in sorted(DEFINITIONS_DIR.glob("*.yaml")):
        spec = load_definition_file(path)
        if spec.name in specs or spec.name in shared:
            raise ValueError(f"benchmark {spec.name!r} is defined twice (again in {path})")
        specs[spec.name] = spec
    return specs


def list_benchmarks() -> list[str]:
    """Every shipped benchmark name, sorted."""
    return sorted([*list_definitions(), *_eval_only()])


def get_benchmark(name: str) -> DatasetDefinition:
    """The shipped benchmark ``name``, or the definition in ``name`` when it is a YAML path.
    An unknown name lists close matches and every known benchmark."""
    if name.endswith((".yaml", ".yml")):
        return load_definition_file(name)
    if name in _eval_only():
        return _eval_only()[name]
    if name in list_definitions():
        return get_definition(name, kind="benchmark")
    known = list_benchmarks()
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownBenchmarkError(f"unknown benchmark {name!r}.{hint} Known benchmarks: {', '.join(known)} "
                                "(or give the path of a definition YAML file)")


def where_to_get(spec: DatasetDefinition, split: str) -> str:
    """Where the data of ``split`` comes from, for a message about missing data."""
    source = spec.source(split)
    if source.path:
        return f"the hub dataset {source.path} (leave data_dir unset) or a local copy named {source.local_file}"
    if source.local_file:
        return (f"a local file {source.local_file} (docs/evaluation.md lists where each benchmark file comes "
                "from; a user-supplied set such as stdio_code is yours to write)")
    return "its generator"


def missing_data(spec: DatasetDefinition, data_dir: str | None, data_file: str | None = None,
                 split: str | None = None) -> str | None:
    """Why ``spec``'s evaluated split cannot be read with these settings, or None when it can
    (a generator, the hub when no ``data_dir`` is given, or a local file that exists)."""
    split = split or spec.eval_split
    if split is None:
        return f"{spec.name} has no evaluation split"
    try:
        path = local_path(spec, split, data_dir, data_file)
    except (TaskDataError, DefinitionError) as exc:  # no local copy of that split, or no such split
        return str(exc)
    source = spec.source(split)
    if path is None:
        if source.generator or source.path:
            return None
        return f"{spec.name} reads a local file only ({source.local_file}): pass data_dir=<folder holding it>"
    if not Path(path).expanduser().is_file():
        return f"{spec.name}: data file {str(path)!r} does not exist; get {where_to_get(spec, split)}"
    return None


def require_data(specs: list[DatasetDefinition], data_dir: str | None, data_file: str | None = None,
                 split: str | None = None) -> None:
    """Refuse, in one line naming each file, benchmarks whose data is missing, before any model loads."""
    reasons = [r for r in (missing_data(spec, data_dir, data_file, split) for spec in specs) if r is not None]
    if reasons:
        raise BenchmarkDataMissing("; ".join(reasons))


def available(specs: list[DatasetDefinition], data_dir: str | None,
              split: str | None = None) -> tuple[list[DatasetDefinition], dict[str, str]]:
    """``benchmark=all``: the benchmarks whose data can be read, and ``{name: reason}`` for the rest."""
    keep, skipped = [], {}
    for spec in specs:
        reason = missing_data(spec, data_dir, None, split)
        if reason is None:
            keep.append(spec)
        else:
            skipped[spec.name] = reason
    return keep, skipped
