"""Benchmark definitions: small declarative YAML files, one per benchmark.

Each ``benchmarks/definitions/<name>.yaml`` says where the data comes from, how a
row becomes a prompt and a reference answer, which verifier scores a completion,
and which metrics to report. Nothing benchmark-specific lives in Python except the
named reference extractors of :mod:`benchmarks.extractors` that a definition picks
by name. ``version`` goes up whenever a change can move a score (prompt, answer
extraction, verifier options), and it is written into every result file.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from typing import Any

import yaml

METRICS = ("accuracy", "pass@k", "maj@k")


class BenchmarkNotFoundError(KeyError):
    """Raised by :func:`get_benchmark` for an unknown name."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


@dataclass(frozen=True)
class DatasetSource:
    """Where the rows come from: a hub dataset, a local file, or a Python generator."""

    path: str | None = None
    """Hub dataset name for ``datasets.load_dataset`` (``openai/gsm8k``)."""
    name: str | None = None
    """Hub dataset config (``main`` for GSM8K, ``sanitized`` for MBPP)."""
    split: str = "test"
    """Split to evaluate."""
    local_file: str | None = None
    """File name looked up in ``data_dir`` when one is given (e.g. ``gsm8k_test.jsonl``)."""
    generator: str | None = None
    """``module:function`` returning a list of row dicts, for synthetic tasks; gets ``split`` and ``kwargs``."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``generator``."""
    id_range: tuple[int, int] | None = None
    """Keep rows whose integer id lies in ``[lo, hi]`` (MBPP's test split is task 11-510 of the full file)."""


@dataclass(frozen=True)
class VerifierSpec:
    """Which verifier scores a completion, built with ``rewards.get_verifier(name, **options)``."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    """Verifier keyword -> row field, passed as ``verifier(completion, reference, **fields)``."""


@dataclass(frozen=True)
class FewShotSpec:
    """Worked examples put before the question when ``num_fewshot > 0``."""

    source: DatasetSource | None = None
    """Rows to take the first ``num_fewshot`` examples from (e.g. GSM8K's train split)."""
    examples: tuple[dict[str, Any], ...] = ()
    """Inline example rows, used when ``source`` is not given."""
    target_template: str = "{answer}"
    """The example's answer, formatted from its row like the prompt template."""


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark, as read from its YAML definition."""

    name: str
    version: int
    description: str
    source: DatasetSource
    prompt_template: str
    """``str.format`` template over the row's fields; list fields are joined with newlines."""
    answer_field: str | None
    """Row field holding the reference (passed to the verifier as ``reference``); ``null`` passes
    ``None`` when everything the verifier needs is in its fields (code tests)."""
    verifier: VerifierSpec
    id_field: str | None = None
    """Row field holding a stable problem id; ``null`` numbers the rows ``<name>/<index>``."""
    answer_extractor: str | None = None
    """Name in :data:`benchmarks.extractors.EXTRACTORS` turning ``answer_field`` into the reference."""
    metrics: tuple[str, ...] = ("accuracy",)
    """Metric families to report: ``accuracy``, ``pass@k``, ``maj@k``."""
    breakdown: tuple[str, ...] = ()
    """Row fields to report accuracy per value of (e.g. ``subject``, ``level``)."""
    reference_completion: str = "{reference}"
    """Template of the completion written by ``write_reference_samples``: must score 1.0."""
    corruption: str = "answer"
    """How a reference sample is broken so it must score 0: ``answer`` or ``code``."""
    requires_code_execution: bool = False
    """True for benchmarks that run model-written code (needs ``allow_code_execution=true``)."""
    stop: tuple[str, ...] = ()
    """Stop strings for raw-prompt generation (a base model continuing the prompt); not used with a
    chat template, where the answer comes in the model's own format (e.g. a fenced code block)."""
    score_timeout: float = 10.0
    """Seconds before one verifier call is killed (status ``timeout``); ``score_timeout=`` overrides it."""
    fewshot: FewShotSpec | None = None

    @property
    def key(self) -> str:
        return f"{self.name}@v{self.version}"


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(known)}")
    return cls(**data)


def parse_spec(data: dict[str, Any], where: str = "benchmark definition") -> BenchmarkSpec:
    """Build a :class:`BenchmarkSpec` from a parsed YAML mapping, rejecting unknown keys."""
    data = dict(data)
    source = dict(data.pop("source"))
    if source.get("id_range") is not None:
        source["id_range"] = tuple(source["id_range"])
    data["source"] = _build(DatasetSource, source, f"{where}: source")
    data["verifier"] = _build(VerifierSpec, dict(data.pop("verifier")), f"{where}: verifier")
    if data.get("fewshot") is not None:
        shot = dict(data.pop("fewshot"))
        if shot.get("source") is not None:
            shot["source"] = _build(DatasetSource, dict(shot["source"]), f"{where}: fewshot.source")
        shot["examples"] = tuple(shot.get("examples", ()))
        data["fewshot"] = _build(FewShotSpec, shot, f"{where}: fewshot")
    for key in ("metrics", "breakdown", "stop"):
        if key in data:
            data[key] = tuple(data[key])
    spec = _build(BenchmarkSpec, data, where)
    bad = [m for m in spec.metrics if m not in METRICS]
    if bad:
        raise ValueError(f"{where}: unknown metric(s) {bad}; choose from {list(METRICS)}")
    if spec.corruption not in ("answer", "code"):
        raise ValueError(f"{where}: corruption must be 'answer' or 'code', got {spec.corruption!r}")
    return spec


@cache
def _definitions() -> dict[str, BenchmarkSpec]:
    specs: dict[str, BenchmarkSpec] = {}
    folder = resources.files("benchmarks") / "definitions"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        spec = parse_spec(yaml.safe_load(entry.read_text(encoding="utf-8")), f"benchmarks/definitions/{entry.name}")
        if spec.name in specs:
            raise ValueError(f"benchmark {spec.name!r} is defined twice (second time in {entry.name})")
        specs[spec.name] = spec
    return specs


def list_benchmarks() -> list[str]:
    """Names of every shipped benchmark, sorted."""
    return sorted(_definitions())


def get_benchmark(name: str) -> BenchmarkSpec:
    """The benchmark called ``name``; an unknown name lists the known ones and close matches."""
    specs = _definitions()
    if name in specs:
        return specs[name]
    close = difflib.get_close_matches(name, list(specs), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise BenchmarkNotFoundError(f"unknown benchmark {name!r}.{hint} Known benchmarks: {', '.join(sorted(specs))}")
