"""Suites: a named list of benchmarks, each with its standard generation setting, as a YAML file.

``conf/eval_suites/<name>.yaml`` holds the shipped ones (``math_reasoning``, ``math_reasoning_full``,
``grade_school``, ``code``); ``suite=<path>.yaml`` reads a copy a user edited. A member names its
benchmark and may set ``n``, ``k``, ``temperature``, ``top_p``, ``top_k``, ``num_fewshot`` and
``max_new_tokens``; every other setting (and these, when a member leaves them out) comes from the
command line, so ``limit=20 max_new_tokens=256`` shortens every member of a suite.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from benchmarks.config import EvalConfig
from reasoning_rl.errors import UserError

SUITES_PACKAGE = "reasoning_rl.conf"
SUITES_FOLDER = "eval_suites"


class SuiteError(UserError, ValueError):
    """An unknown suite, or a suite file that cannot be used (the message names the file and the key)."""


@dataclass(frozen=True)
class SuiteMember:
    """One benchmark of a suite and the generation settings it is reported with."""

    benchmark: str
    """A benchmark name (``reasoning-rl-eval benchmark=``) or a definition YAML path."""
    n: int | None = None
    """Samples per problem; with n > 1 the row reports avg@n and the pass@k spectrum."""
    k: tuple[int, ...] | None = None
    """The k of pass@k and maj@k (each <= n)."""
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    num_fewshot: int | None = None
    max_new_tokens: int | None = None

    def settings(self) -> dict[str, Any]:
        """The settings this member fixes (the others come from the command line)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "benchmark" and getattr(self, f.name) is not None}

    def config(self, cfg: EvalConfig) -> EvalConfig:
        """``cfg`` for this member: its benchmark and its settings on top. ``k`` defaults to ``[1, n]``
        when the member samples and the command line left ``k`` at ``[1]``."""
        own = self.settings()
        if "k" in own:
            own["k"] = list(own["k"])
        elif self.n and self.n > 1:
            own["k"] = sorted({1, self.n})
        return dataclasses.replace(cfg, benchmark=self.benchmark, **own)


@dataclass(frozen=True)
class Suite:
    name: str
    version: int
    description: str
    members: tuple[SuiteMember, ...] = field(default_factory=tuple)
    source: str = ""
    """The file it was read from."""


def _shipped() -> dict[str, Any]:
    folder = resources.files(SUITES_PACKAGE) / SUITES_FOLDER
    return {e.name[: -len(".yaml")]: e for e in folder.iterdir() if e.name.endswith(".yaml")}


def list_suites() -> list[str]:
    """Names of the shipped suites, sorted."""
    return sorted(_shipped())


def load_suite(name: str) -> Suite:
    """The shipped suite ``name``, or the suite file at ``name`` (a ``.yaml`` path). An unknown name
    lists the known suites; a bad file names itself and the key."""
    if name.endswith((".yaml", ".yml")):
        path = Path(name).expanduser()
        if not path.is_file():
            raise SuiteError(f"suite file {str(path)!r} does not exist; copy one of conf/{SUITES_FOLDER}/ "
                             f"({', '.join(list_suites())}) and pass its path")
        return parse_suite(path.read_text(encoding="utf-8"), str(path))
    shipped = _shipped()
    if name not in shipped:
        close = difflib.get_close_matches(name, list(shipped), n=2)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise SuiteError(f"unknown suite {name!r}.{hint} Known suites: {', '.join(sorted(shipped))} "
                         f"(conf/{SUITES_FOLDER}/), or give the path of a suite YAML file")
    return parse_suite(shipped[name].read_text(encoding="utf-8"), f"conf/{SUITES_FOLDER}/{name}.yaml")


def parse_suite(text: str, where: str) -> Suite:
    """A :class:`Suite` from YAML text; every problem is a :class:`SuiteError` naming ``where``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SuiteError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{where}: a suite is a mapping with name, version, description and benchmarks")
    unknown = sorted(set(data) - {"name", "version", "description", "benchmarks"})
    missing = [k for k in ("name", "benchmarks") if k not in data]
    if unknown or missing:
        raise SuiteError(f"{where}: " + "; ".join(
            ([f"unknown key(s) {unknown}"] if unknown else []) + ([f"missing key(s) {missing}"] if missing else []))
            + " (keys: name, version, description, benchmarks)")
    entries = data["benchmarks"]
    if not isinstance(entries, list) or not entries:
        raise SuiteError(f"{where}: benchmarks must be a non-empty list of members ({{benchmark: aime24, n: 16}})")
    members = tuple(_member(e, f"{where}: benchmarks[{i}]") for i, e in enumerate(entries))
    names = [m.benchmark for m in members]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SuiteError(f"{where}: benchmark(s) {repeated} listed twice; a suite has one row per benchmark")
    return Suite(str(data["name"]), int(data.get("version", 1)), str(data.get("description", "")), members, where)


def _member(entry: Any, where: str) -> SuiteMember:
    if isinstance(entry, str):
        entry = {"benchmark": entry}
    if not isinstance(entry, dict) or "benchmark" not in entry:
        raise SuiteError(f"{where}: a member is a benchmark name or a mapping with `benchmark` "
                         f"({{benchmark: aime24, n: 16}}), got {entry!r}")
    known = {f.name for f in fields(SuiteMember)}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise SuiteError(f"{where}: unknown key(s) {unknown}; a member takes {sorted(known)}")
    values = dict(entry)
    if values.get("k") is not None:
        values["k"] = tuple(values["k"]) if isinstance(values["k"], list) else (values["k"],)
    n = values.get("n") or 1
    if any(k > n for k in values.get("k") or ()):
        raise SuiteError(f"{where}: k={list(values['k'])} needs k <= n, but n={n}")
    return SuiteMember(**values)
