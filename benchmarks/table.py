"""A results table written four ways: markdown, CSV, a LaTeX ``tabular`` and JSON.

A :class:`Table` is a caption, column names and rows of already-formatted cells; the JSON file
holds the numbers behind it (``data``), not the cells. Scores are percentages with their 95%
interval, ``45.2 [38.1, 52.0]``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.intervals import Interval
from reasoning_rl.run_folder.atomic import atomic_write_text

FORMATS = ("md", "csv", "tex", "json")


@dataclass
class Table:
    caption: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Lines under the table (markdown) or in a comment (LaTeX)."""
    data: dict[str, Any] = field(default_factory=dict)
    """What the JSON file holds."""


def cell(iv: Interval | None, digits: int = 1) -> str:
    """``45.2 [38.1, 52.0]`` (percent); ``-`` for none."""
    if iv is None:
        return "-"
    return f"{100 * iv.value:.{digits}f} [{100 * iv.low:.{digits}f}, {100 * iv.high:.{digits}f}]"


def signed_cell(iv: Interval, digits: int = 1) -> str:
    """``+3.3 [+0.5, +6.1] *``: a difference, starred when its interval excludes 0."""
    star = " *" if iv.excludes_zero else ""
    return f"{100 * iv.value:+.{digits}f} [{100 * iv.low:+.{digits}f}, {100 * iv.high:+.{digits}f}]{star}"


def markdown(table: Table) -> str:
    lines = [f"**{table.caption}**", "", "| " + " | ".join(table.columns) + " |",
             "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(table.columns))) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines + (["", *table.notes] if table.notes else [])) + "\n"


def csv_text(table: Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(table.rows)
    return buffer.getvalue()


TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _tex(text: str) -> str:
    """``text`` with LaTeX's special characters escaped, one character at a time."""
    return "".join(TEX_ESCAPES.get(ch, ch) for ch in text)


def latex(table: Table) -> str:
    """A ``tabular`` with booktabs rules (``\\usepackage{booktabs}``); the caption and notes as comments."""
    spec = "l" + "r" * (len(table.columns) - 1)
    lines = [f"% {table.caption}", *[f"% {n}" for n in table.notes], f"\\begin{{tabular}}{{{spec}}}", "\\toprule",
             " & ".join(_tex(c) for c in table.columns) + " \\\\", "\\midrule"]
    lines += [" & ".join(_tex(c) for c in row) + " \\\\" for row in table.rows]
    return "\n".join([*lines, "\\bottomrule", "\\end{tabular}"]) + "\n"


def write_table(base: str | Path, table: Table) -> list[Path]:
    """Write ``<base>.md``, ``.csv``, ``.tex`` and ``.json``; return the paths."""
    base = Path(base)
    texts = {"md": markdown(table), "csv": csv_text(table), "tex": latex(table),
             "json": json.dumps({"caption": table.caption, "columns": table.columns, "rows": table.rows,
                                 "notes": table.notes, **table.data}, indent=2, default=str) + "\n"}
    paths = []
    for suffix in FORMATS:
        path = base.with_name(f"{base.name}.{suffix}")
        atomic_write_text(path, texts[suffix])
        paths.append(path)
    return paths

