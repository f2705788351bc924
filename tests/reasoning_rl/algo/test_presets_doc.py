"""docs/algorithms.md lists every preset that runs the grpo module, with the settings its file changes,
as conf/algo/ has them (the table between the markers is this test's :func:`presets_table`)."""

import re
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
ALGO_CONF = REPO_ROOT / "conf" / "algo"
BEGIN, END = "<!-- grpo presets: begin -->", "<!-- grpo presets: end -->"


def _runs_grpo(name: str) -> bool:
    values = yaml.safe_load((ALGO_CONF / f"{name}.yaml").read_text())
    if values.get("name") is not None:
        return values["name"] == "grpo"
    parents = [d for d in values.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    return any(_runs_grpo(p) for p in parents)


def _dotted(values: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        if isinstance(value, dict):
            out += _dotted(value, f"{prefix}{key}.")
        else:
            out.append(f"`{prefix}{key}={str(value).lower() if isinstance(value, bool) else value}`")
    return out


def presets_table() -> str:
    rows = ["| `algo=` | what it is | settings it changes (over `grpo`) |", "| --- | --- | --- |"]
    for path in sorted(ALGO_CONF.glob("*.yaml")):
        name = path.stem
        if not _runs_grpo(name):
            continue
        header = " ".join(line.lstrip("# ").strip() for line in path.read_text().splitlines()[:3])
        what = re.search(r"algo=\S+\s+\(([^)]*)\)", header).group(1)  # the first lines' (source)
        values = yaml.safe_load(path.read_text())
        changed = [] if name == "grpo" else _dotted({k: v for k, v in values.items()
                                                     if k not in ("defaults", "variant")})
        rows.append(f"| `{name}` | {what} | {', '.join(changed) or 'the defaults'} |")
    return "\n".join(rows)


def test_docs_list_every_grpo_preset_with_its_settings():
    doc = (REPO_ROOT / "docs" / "algorithms.md").read_text()
    listed = doc.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert listed == presets_table(), "replace the table in docs/algorithms.md with:\n" + presets_table()


def test_fourteen_presets_run_the_grpo_module():
    assert sum(_runs_grpo(p.stem) for p in ALGO_CONF.glob("*.yaml")) == 14
