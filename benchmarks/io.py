"""JSON/JSONL result files, written atomically (``reasoning_rl.run_folder.atomic``): a crash never leaves a half-written one."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from reasoning_rl.errors import UserError
from reasoning_rl.run_folder.atomic import atomic_write_text


class JsonlError(UserError, ValueError):
    """A JSONL file with a line that is not JSON; the message names the file and the line."""


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records))


def iter_jsonl(path: str | Path, error: type[UserError] = JsonlError) -> Iterator[tuple[int, Any]]:
    """``(line number, record)`` of each non-blank line of a JSONL file; a line that is not JSON
    raises ``error`` naming the file, the line and the column."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno}): "
                            f"{line.strip()[:80]!r}") from None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a bad line is an error naming the file and line number."""
    return [record for _, record in iter_jsonl(path)]
