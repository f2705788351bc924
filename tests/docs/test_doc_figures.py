"""Figures the docs state that a test can recompute cheaply: the shipped dataset definitions (names, versions,
held-out counts), the presets the README's table names, the planner's predictions in docs/memory.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from reasoning_rl.tasks.data import load_problems
from reasoning_rl.tasks.definition import get_definition, list_definitions
from tests.conftest import SHARED_DATA
from tests.docs.conftest import REPO


def _table_rows(text: str, header_start: str) -> list[list[str]]:
    """The body rows of the first Markdown table whose header line starts with ``header_start``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


DEFINITIONS_TABLE = _table_rows((REPO / "docs" / "tasks.md").read_text(), "| name | version |")


def test_tasks_md_lists_every_shipped_definition():
    named = {n for row in DEFINITIONS_TABLE for n in re.findall(r"`(\w+)`", row[0])}
    assert named == set(list_definitions())


@pytest.mark.skipif(SHARED_DATA is None, reason="../shared/data not found")
@pytest.mark.parametrize("row", DEFINITIONS_TABLE, ids=lambda r: r[0].strip("`"))
def test_tasks_md_versions_and_held_out_counts(row):
    """docs/tasks.md's version column, and the `test` split's size where the row states it."""
    stated = re.search(r"`test` \((?:the )?([\d,]+)\b(?!-)", row[2])
    for name in re.findall(r"`(\w+)`", row[0]):
        definition = get_definition(name)
        assert str(definition.version) == row[1], f"{name}: docs/tasks.md says version {row[1]}"
        if stated:
            problems, _ = load_problems(definition, "test", data_dir=SHARED_DATA)
            assert len(problems) == int(stated.group(1).replace(",", "")), f"{name}: docs/tasks.md says {stated[0]}"


def test_readme_table_names_every_algorithm_preset():
    readme = (REPO / "README.md").read_text()
    table = readme.split("## Which preset for what", 1)[1].split("\n## ", 1)[0]
    presets = sorted(p.stem for p in (REPO / "conf" / "algo").glob("*.yaml"))
    missing = [p for p in presets if f"`{p}`" not in table and f"algo={p}`" not in table]
    assert not missing, f"README's 'Which preset for what' does not name these conf/algo presets: {missing}"
    for experiment in re.findall(r"experiment=(\w+)", table):
        assert (REPO / "conf" / "experiment" / f"{experiment}.yaml").is_file(), experiment


def _plan_commands() -> list[tuple[str, str]]:
    """(experiment, command) for each `reasoning-rl-bench plan experiment=...` line of docs/memory.md."""
    text = (REPO / "docs" / "memory.md").read_text().replace("\\\n", " ")
    return [(m.group(2), m.group(1)) for m in
            re.finditer(r"^HF_HUB_OFFLINE=1 (reasoning-rl-bench plan experiment=(\w+) .*)$", text, flags=re.M)]


@pytest.mark.parametrize(("experiment", "command"), _plan_commands(), ids=lambda v: v if "=" not in v else "")
def test_memory_md_planner_predictions(experiment, command):
    """The planner's peak for each preset as shipped, as docs/memory.md's table states it (to 0.1 GB)."""
    words = command.split()
    device_gb = words[words.index("--device-gb") + 1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench", *words[1:], "--no-results"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    peak = float(re.search(r"memory plan: peak ([\d.]+) GB", out.stdout).group(1))
    rows, shipped = [], None  # a row "the same" repeats the row above at another device size
    for r in _table_rows((REPO / "docs" / "memory.md").read_text(), "| model (prompt tokens) |"):
        shipped = r[1].split("`")[1] if r[1].endswith("as shipped") else shipped if r[1] == "the same" else None
        if shipped == f"experiment={experiment}" and r[2] == device_gb:
            rows.append(r)
    assert rows, f"docs/memory.md has no row for experiment={experiment} as shipped at {device_gb} GB"
    stated = float(rows[0][6].split()[0])
    assert stated == round(peak, 1), f"docs/memory.md says {stated} GB for {experiment}; the planner prints {peak}"


def test_index_lists_every_page_once():
    index = (REPO / "docs" / "index.md").read_text()
    linked = re.findall(r"^- \[(\w+\.md)\]\(\1\): ", index, flags=re.M)
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "index.md")
    assert sorted(linked) == pages
