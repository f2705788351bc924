"""Dataset definitions: one YAML file per dataset, read by training and evaluation alike.

Each ``reasoning_rl/tasks/definitions/<name>.yaml`` says where the rows of every split
come from, how a row becomes a prompt and a reference answer, which verifier scores a
completion (and which row fields it gets), which split evaluation measures and which
split training uses. ``reasoning-rl-train task=<name>`` (:class:`reasoning_rl.tasks.Task`)
and ``reasoning-rl-eval benchmark=<name>`` (:mod:`benchmarks.runner`) both build their
problems from it with :func:`reasoning_rl.tasks.data.load_problems`, so a training run's
held-out accuracy and the benchmark's are the same measurement. The keys only evaluation
reads (metrics, breakdown, reference_completion, corruption, fewshot, stop,
score_timeout) sit in the same file.

Nothing dataset-specific lives in Python except what a definition names: a reference
extractor of :mod:`reasoning_rl.tasks.extractors`, or a generator such as
:func:`reasoning_rl.tasks.arithmetic.make_arithmetic_dataset`. ``version`` goes up
whenever a change can move a score (prompt, answer extraction, verifier options) or
changes the problem set or its ids; it is written into every result file.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from reasoning_rl.errors import UserError
from reasoning_rl.tasks.extractors import EXTRACTORS

METRICS = ("accuracy", "pass@k", "maj@k")
CORRUPTIONS = ("answer", "code")


class DefinitionNotFoundError(UserError, KeyError):
    """Raised by :func:`get_definition` for an unknown name."""


class DefinitionError(UserError, ValueError):
    """A dataset definition that cannot be used: not YAML, an unknown or missing key, a bad value,
    an unknown split. The message names the file (or definition) and the key."""


class DefinitionFileNotFoundError(DefinitionError, FileNotFoundError):
    """A definition YAML file given by path that does not exist."""


@dataclass(frozen=True)
class DatasetSource:
    """Where one split's rows come from: a hub dataset, a local file, or a Python generator.

    In a definition file, ``source:`` gives the keys every split shares and each entry of
    ``splits:`` the keys of that split (``kwargs`` are merged, the split's winning).
    """

    path: str | None = None
    """Hub dataset name for ``datasets.load_dataset`` (``openai/gsm8k``)."""
    name: str | None = None
    """Hub dataset config (``main`` for GSM8K, ``sanitized`` for MBPP)."""
    split: str | None = None
    """Split asked of the hub dataset, or passed to the generator; the split's own key when not given."""
    local_file: str | None = None
    """File name looked up in ``data_dir`` when one is given (e.g. ``gsm8k_test.jsonl``)."""
    generator: str | None = None
    """``module:function`` returning a list of row dicts, for synthetic data; called with ``split`` and ``kwargs``."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``generator``."""
    id_range: tuple[int, int] | None = None
    """Keep rows whose integer ``id_field`` lies in ``[lo, hi]`` (MBPP's test split is tasks 11-510 of the full file)."""
    hash_range: tuple[float, float] | None = None
    """Keep rows whose rendered prompt hashes into ``[lo, hi)`` of [0, 1] (sha256,
    ``reasoning_rl.tasks.synthetic.hash_bucket``): splits of one file with disjoint ranges share no
    problem whatever the file's order (GSM8K's ``validation``, carved out of its train file)."""
    description: str | None = None
    """What the split holds, in words; error messages quote it."""


@dataclass(frozen=True)
class VerifierSpec:
    """Which verifier scores a completion, built with ``rewards.get_verifier(name, **options)``."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    """Verifier keyword -> row field, passed as ``verifier(completion, reference, **fields)``."""

    def build(self, overrides: dict[str, Any] | None = None) -> Any:
        """The verifier object, with ``overrides`` on top of the definition's options."""
        import rewards

        return rewards.get_verifier(self.name, **{**self.options, **(overrides or {})})


@dataclass(frozen=True)
class FewShotSpec:
    """Worked examples put before the question when evaluation asks for ``num_fewshot > 0``."""

    split: str | None = None
    """Split of this definition whose first rows are the examples (e.g. GSM8K's ``train``)."""
    examples: tuple[dict[str, Any], ...] = ()
    """Inline example rows, used when ``split`` is not given."""
    target_template: str = "{answer}"
    """The example's answer, formatted from its row like the prompt template."""


@dataclass(frozen=True)
class DatasetDefinition:
    """One dataset, as read from its YAML definition."""

    name: str
    version: int
    description: str
    splits: dict[str, DatasetSource]
    """Every split's source, the shared ``source:`` keys already merged in."""
    eval_split: str | None
    """The split evaluation measures (``reasoning-rl-eval``, and held-out evaluation in training)."""
    train_split: str | None
    """The split training uses; ``null`` when the dataset has none (an evaluation set such as MATH-500)."""
    prompt_template: str
    """``str.format`` template over the row's fields; list fields are joined with newlines."""
    answer_field: str | None
    """Row field holding the reference (passed to the verifier as ``reference``); ``null`` passes
    ``None`` when everything the verifier needs is in its fields (code tests)."""
    verifier: VerifierSpec
    id_field: str | None = None
    """Row field holding a stable problem id; ``null`` numbers the rows ``<name>/<index>``."""
    answer_extractor: str | None = None
    """Name in :data:`reasoning_rl.tasks.extractors.EXTRACTORS` turning ``answer_field`` into the reference."""
    metrics: tuple[str, ...] = ("accuracy",)
    """Metric families to report: ``accuracy``, ``pass@k``, ``maj@k``."""
    breakdown: tuple[str, ...] = ()
    """Row fields to report accuracy per value of (e.g. ``subject``, ``level``)."""
    reference_completion: str = "{reference}"
    """Template of the completion written by ``write_reference_samples``: must score 1.0."""
    corruption: str = "answer"
    """How a reference sample is broken so it must score 0: ``answer`` or ``code``."""
    requires_code_execution: bool = False
    """True for datasets scored by running model-written code (evaluation needs ``allow_code_execution=true``)."""
    stop: tuple[str, ...] = ()
    """Stop strings for raw-prompt generation in evaluation (a base model continuing the prompt); not used
    with a chat template, where the answer comes in the model's own format (e.g. a fenced code block)."""
    score_timeout: float = 10.0
    """Seconds before one verifier call is killed in evaluation (status ``timeout``); ``score_timeout=`` overrides it."""
    fewshot: FewShotSpec | None = None

    @property
    def key(self) -> str:
        return f"{self.name}@v{self.version}"

    def source(self, split: str) -> DatasetSource:
        """The source of ``split``; an unknown split lists the definition's splits."""
        if split not in self.splits:
            raise DefinitionError(f"{self.name!r} has no split {split!r}; its splits: {', '.join(self.splits)}")
        return self.splits[split]


def _check_keys(cls: type, keys: set[str], where: str) -> None:
    known = {f.name for f in fields(cls)}
    unknown = sorted(keys - known)
    if unknown:
        raise DefinitionError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(known)}")
    required = {f.name for f in fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = sorted(required - keys)
    if missing:
        raise DefinitionError(f"{where}: missing key(s) {missing}")


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    _check_keys(cls, set(data), where)
    return cls(**data)


def _split_source(shared: dict[str, Any], own: dict[str, Any], key: str, where: str) -> DatasetSource:
    merged = {**shared, **own, "kwargs": {**shared.get("kwargs", {}), **own.get("kwargs", {})}}
    if merged.get("split") is None:
        merged["split"] = key
    for key in ("id_range", "hash_range"):
        if merged.get(key) is not None:
            merged[key] = tuple(merged[key])
    source = _build(DatasetSource, merged, where)
    if (source.path and source.generator) or not (source.path or source.generator or source.local_file):
        raise DefinitionError(f"{where}: unknown source: set one of `path` (a hub dataset) or `generator` "
                         "(module:function), or only `local_file` (a file found in data_dir)")
    return source


def parse_definition(data: dict[str, Any], where: str = "dataset definition") -> DatasetDefinition:
    """Build a :class:`DatasetDefinition` from a parsed YAML mapping, rejecting unknown keys."""
    data = dict(data)
    shared = dict(data.pop("source", None) or {})
    _check_keys(DatasetDefinition, set(data), where)
    if not isinstance(data["splits"], dict) or not all(isinstance(v, dict) or v is None
                                                       for v in data["splits"].values()):
        raise DefinitionError(f"{where}: `splits` must map each split's name to its source keys "
                              f"(path, name, split, local_file, generator, ...), got {data['splits']!r}")
    data["splits"] = {str(k): _split_source(shared, dict(v or {}), str(k), f"{where}: split {k!r}")
                      for k, v in dict(data["splits"]).items()}
    data["verifier"] = _build(VerifierSpec, dict(data.pop("verifier", None) or {}), f"{where}: verifier")
    if data.get("fewshot") is not None:
        shot = dict(data.pop("fewshot"))
        shot["examples"] = tuple(shot.get("examples", ()))
        data["fewshot"] = _build(FewShotSpec, shot, f"{where}: fewshot")
    for key in ("metrics", "breakdown", "stop"):
        if key in data:
            data[key] = tuple(data[key])
    spec = _build(DatasetDefinition, data, where)
    _check(spec, where)
    return spec


def _check(spec: DatasetDefinition, where: str) -> None:
    problems = []
    bad = [m for m in spec.metrics if m not in METRICS]
    if bad:
        problems.append(f"unknown metric(s) {bad}; choose from {list(METRICS)}")
    if spec.corruption not in CORRUPTIONS:
        problems.append(f"corruption must be one of {list(CORRUPTIONS)}, got {spec.corruption!r}")
    if spec.answer_extractor and spec.answer_extractor not in EXTRACTORS:
        problems.append(f"unknown answer_extractor {spec.answer_extractor!r}; known: {sorted(EXTRACTORS)}")
    named = {"eval_split": spec.eval_split, "train_split": spec.train_split,
             "fewshot.split": spec.fewshot.split if spec.fewshot else None}
    problems += [f"{key} {value!r} is not one of its splits {list(spec.splits)}"
                 for key, value in named.items() if value is not None and value not in spec.splits]
    if spec.id_field is None and any(s.id_range for s in spec.splits.values()):
        problems.append("id_range needs id_field (the row field the range applies to)")
    problems += [f"split {name!r}: hash_range must be [lo, hi) with 0 <= lo < hi <= 1, got {list(s.hash_range)}"
                 for name, s in spec.splits.items()
                 if s.hash_range is not None and not (len(s.hash_range) == 2 and 0 <= s.hash_range[0] < s.hash_range[1] <= 1)]
    if problems:
        raise DefinitionError(f"{where}: " + "; ".join(problems))


def load_definition_file(path: str | Path) -> DatasetDefinition:
    """The definition in a YAML file of your own (``task.name=path/to/mine.yaml`` reads it this way)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DefinitionFileNotFoundError(f"dataset definition file {str(p)!r} does not exist: check the path")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise DefinitionError(f"{p}: byte 0x{exc.object[exc.start]:02x} at offset {exc.start} is not UTF-8; "
                              "save the file as UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DefinitionError(f"{p}{at}: not valid YAML ({problem}); fix the file "
                              "(docs/tasks.md lists the keys of a definition)") from None
    if not isinstance(data, dict):
        raise DefinitionError(f"{p} holds {type(data).__name__ if data is not None else 'nothing'}, not a "
                              "mapping of keys (name, splits, prompt_template, ...): see docs/tasks.md")
    return parse_definition(data, str(p))


@cache
def _definitions() -> dict[str, DatasetDefinition]:
    specs: dict[str, DatasetDefinition] = {}
    folder = resources.files("reasoning_rl.tasks") / "definitions"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        spec = parse_definition(yaml.safe_load(entry.read_text(encoding="utf-8")),
                                f"reasoning_rl/tasks/definitions/{entry.name}")
        if spec.name in specs:
            raise ValueError(f"dataset {spec.name!r} is defined twice (second time in {entry.name})")
        specs[spec.name] = spec
    return specs


def list_definitions() -> list[str]:
    """Names of every shipped dataset definition, sorted."""
    return sorted(_definitions())


def get_definition(name: str, kind: str = "dataset") -> DatasetDefinition:
    """The shipped definition called ``name``, or the one in ``name`` when it is a path to a YAML file.

    An unknown name lists the known ones and close matches; ``kind`` is the word the
    message uses for them (``task`` in training, ``benchmark`` in evaluation).
    """
    if name.endswith((".yaml", ".yml")):
        return load_definition_file(name)
    specs = _definitions()
    if name in specs:
        return specs[name]
    close = difflib.get_close_matches(name, list(specs), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise DefinitionNotFoundError(f"unknown {kind} {name!r}.{hint} Known {kind}s: {', '.join(sorted(specs))} "
                                  "(reasoning_rl/tasks/definitions/), or give the path of a definition YAML file")
