"""The commands README.md and docs/*.md show, collected for tests/docs/test_doc_commands.py (docs/testing.md).

What counts as a command (docs/testing.md, "Commands in the docs are tested"):

- in a fenced block marked ``bash``/``sh``/``shell``: every line (joined over trailing backslashes) that starts
  with a project console script, after optional environment assignments (``HF_HUB_OFFLINE=1``) and wrappers
  (``nice -n 19``, ``/usr/bin/time -v``);
- in a fenced block without a language: lines that start with a console script, with or without a ``$ `` prompt
  (a terminal transcript; the script's own output lines start ``<script>:``); when the next line is the script's
  one-line error (``reasoning-rl-train: ...``) the command must exit 2;
- in a Markdown table with ``goal`` and ``command`` columns (the README's "Which preset for what"): each inline
  code span in the command column that starts with a console script (a results table's ``command`` column
  records what was measured and is not run).

A command that cannot run here carries a marker with a reason from ``SKIP_REASONS``: a comment line
``# doc-test: skip <reason>: <why>`` directly above it in its block, or an HTML comment
``<!-- doc-test: skip <reason>: <why> -->`` on the line before the block's fence (every command of the block)
or in the table row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]

CONSOLE_SCRIPTS: tuple[str, ...] = tuple(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"])
"""The project's console scripts, read from pyproject.toml's [project.scripts]."""

SKIP_REASONS: dict[str, str] = {
    "gpu": "needs a CUDA GPU",
    "cluster": "needs a Slurm cluster or several machines",
    "network": "needs the network: a model or data set from the Hugging Face hub, an online tracker",
    "extra": "needs an optional extra that neither `.[dev]` nor `.ci/run` installs (trl, vllm, lm_eval)",
    "user-data": "needs data only a user has (their own files, not creatable by the test)",
}
"""The only reasons a documented command may give for not being run by the test (docs/index.md)."""

SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^\s*(`{3,})([^`\s]*)\s*$")  # an opening fence's backticks and language
_MARKER = re.compile(r"doc-test:\s*skip\s+([\w-]+)\s*(?::\s*(.*?))?\s*(?:-->)?\s*$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
_WRAPPERS = {"nice", "/usr/bin/time", "time", "-v", "-n", "19"}


@dataclass(frozen=True)
class DocCommand:
    """One command a page shows, where it is, and what the page says about running it."""

    page: str  # "README.md" or "docs/<name>.md"
    line: int  # 1-based line of the command's first line
    text: str  # the command as written, continuation lines joined, the trailing comment kept
    setup: tuple[str, ...] = ()  # shell lines of the block before it that define variables (for/assignments)
    skip: str | None = None  # a reason key of SKIP_REASONS, or an unknown word the test reports
    skip_why: str = ""
    expect_exit: int = 0

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def documented_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def starts_with_console_script(command: str) -> bool:
    words = command.split()
    while words and (_ENV.match(words[0]) or words[0] in _WRAPPERS):
        words.pop(0)
    return bool(words) and words[0] in CONSOLE_SCRIPTS


def _marker(text: str) -> tuple[str, str] | None:
    match = _MARKER.search(text)
    return (match.group(1), match.group(2) or "") if match else None


def fenced_blocks(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first content line, line of the closing fence, language) of each fenced block, 0-based; a block opened by
    N backticks closes at a line of at least N backticks alone (so ```` blocks may hold ``` lines)."""
    blocks, i = [], 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening:
            ticks = len(opening.group(1))
            j = i + 1
            while j < len(lines) and not ((m := _FENCE.match(lines[j])) and len(m.group(1)) >= ticks and not m.group(2)):
                j += 1
            blocks.append((i + 1, j, opening.group(2).lower()))
            i = j
        i += 1
    return blocks


def _block_commands(page: str, lines: list[str], start: int, end: int, lang: str, block_marker) -> list[DocCommand]:
    """Commands of one fenced block: content lines ``lines[start:end]`` (0-based)."""
    commands: list[DocCommand] = []
    setup: list[str] = []
    pending = block_marker
    i = start
    while i < end:
        first = i
        text = lines[i].strip()
        while text.endswith("\\") and i + 1 < end:
            i += 1
            text = text[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        if text.startswith("#"):
            pending = _marker(text) or pending
            continue
        transcript = lang not in SHELL_LANGUAGES
        if transcript:  # a `$ ` prompt, or a line that starts with the script (its output starts `script:`)
            text = text.removeprefix("$ ").strip()
        if not starts_with_console_script(text):
            if re.match(r"^done\b", text) and any(line.startswith("for ") for line in setup):  # a loop ends
                setup.pop(max(k for k, line in enumerate(setup) if line.startswith("for ")))
            elif re.match(r"^(for \w+ in .*?;\s*do\b|[A-Za-z_]\w*=|cp |mkdir )", text):  # variables, files
                setup.append(re.sub(r"\s+#.*$", "", text))
            continue
        expect = 0
        if transcript and i < end:
            script = next(w for w in text.split() if w in CONSOLE_SCRIPTS)
            expect = 2 if lines[i].strip().startswith(f"{script}:") else 0
        reason, why = pending if pending else (None, "")
        commands.append(DocCommand(page, first + 1, text, tuple(setup), reason, why, expect))
        pending = block_marker
    return commands


def _table_commands(page: str, lines: list[str]) -> list[DocCommand]:
    commands: list[DocCommand] = []
    column = None
    for n, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index("command") if {"goal", "command"} <= set(cells) else -1
            continue
        if column < 0 or column >= len(cells) or set(cells[column]) <= {"-", " ", ":"}:
            continue
        marker = _marker(line)
        for span in re.findall(r"`([^`]+)`", cells[column]):
            if starts_with_console_script(span):
                reason, why = marker if marker else (None, "")
                commands.append(DocCommand(page, n + 1, span, (), reason, why))
    return commands


def collect_doc_commands() -> list[DocCommand]:
    """Every command README.md and docs/*.md show, in page order."""
    commands: list[DocCommand] = []
    for path in documented_pages():
        page = str(path.relative_to(REPO))
        lines = path.read_text().splitlines()
        for first, end, lang in fenced_blocks(lines):
            before = lines[first - 2] if first >= 2 else ""
            block_marker = _marker(before) if before.lstrip().startswith("<!--") else None
            if lang in SHELL_LANGUAGES or lang in ("", "text"):
                commands += _block_commands(page, lines, first, end, lang, block_marker)
        commands += _table_commands(page, lines)
    return commands


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "doc_commands: runs every command README.md and docs/*.md show (tests/docs; .ci/run's own step)")
