"""Every command README.md and docs/*.md show runs as written, at small size (docs/testing.md).

``test_doc_command_runs`` runs each collected command (tests/docs/conftest.py) in a page's own working folder,
in page order, so a command may use what an earlier one on the page wrote (a warm start's checkpoint, a sweep
that ``reasoning-rl-report`` then reads). The folder holds ``../shared/data`` (a link to the shared data) and the
files a reader is asked to bring (``user_files``). One set of shortening arguments per script is appended, so a
later value wins over the page's: few steps, small limits, no warm start, the tiny model's size. The loop
variables of a reproduction script (``for s in 0 1 2; do``) take their first value.

Every page's commands take over an hour on 2 cores, so the main suite skips them: ``.ci/run`` runs every page but
the six heaviest as its own step (``REASONING_RL_DOC_COMMANDS=all,-docs/tools.md,...``), and every page runs with
``REASONING_RL_DOC_COMMANDS=all python -m pytest tests/docs -m doc_commands`` (docs/testing.md). The checks that
need no run (markers, placeholders) are in the main suite.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.settings.model import TinyModelConfig
from tests.conftest import SHARED_DATA
from tests.docs.conftest import CONSOLE_SCRIPTS, REPO, SKIP_REASONS, DocCommand, collect_doc_commands
from tests.reasoning_rl.conftest import TINY_OVERRIDES

COMMANDS = collect_doc_commands()
RUN_ENV = "REASONING_RL_DOC_COMMANDS"
PLACEHOLDER = re.compile(r"<[a-z_]+>")
LAST_OF_PAGE = {c.page: c for c in COMMANDS if c.skip is None}
"""The last runnable command of each page: after it, the page's working folder is removed."""

MAX_STEPS = 2
"""reasoning-rl-train runs at most this many steps here, with a checkpoint every 2 (SHORTEN)."""

SHORTEN: dict[str, list[str]] = {
    "reasoning-rl-train": [*TINY_OVERRIDES, f"trainer.save_every={MAX_STEPS}"],
    "reasoning-rl-eval": ["limit=2", "max_new_tokens=8", "batch_size=4", "progress=false"],
    "reasoning-rl-report": [],
    "reasoning-rl-export": [],
}
"""Arguments appended to every command of a script (the page's own values come first, so these win)."""

SHORTEN_BENCH: dict[str, list[str]] = {
    "train": ["--steps", "2", "--warmup-steps", "1", "--rounds", "1", "--max-new", "4", "--dataset-size", "32",
              "--prompts-per-step", "2"],
    "math": [], "math-equiv": [],
    "code": ["--rounds", "1"], "code-exec": ["--rounds", "1"],
    "memory": ["--size", "tiny", "--steps", "1"],
    "lmhead": ["--layers", "1", "--prompt-tokens", "16", "--completion-tokens", "16", "--rounds", "2"],
    "gpu": ["--steps", "1"],
    "plan": [],
    "async": ["--steps", "3", "--rounds", "1", "--no-warm-start", "--workdir", "bench_async"],
    "episode-cache": ["--rounds", "1", "--prompts", "2", "--n", "2", "--turns", "2"],
    "stop-in-loop": ["--rounds", "1", "--prompts", "2", "--n", "2", "--turns", "2"],
    "eval": ["--limit", "2", "--max-new-tokens", "8", "--batch-size", "2"],
}
"""reasoning-rl-bench: per subcommand (its flags differ), plus --no-results for every one."""


def _steps_at_most(command: str, limit: int) -> str:
    """`trainer.steps=N` -> at most `limit` (a page's `trainer.steps=0` warm start keeps writing checkpoint-0)."""
    steps = [int(s) for s in re.findall(r"(?<![\w.])trainer\.steps=(\d+)", command)]
    return f"trainer.steps={min([*steps, limit])}"


def _swept(value: str) -> bool:
    return "," in value and not value.startswith(("[", "{", "'[", '"')) and "(" not in value


def smaller_sweep(words: list[str]) -> list[str]:
    """A sweep cut to 2 runs: the first swept setting keeps its first two values, every other one its first.

    The swept settings are the command's own `key=a,b,c` and those of an experiment preset's
    `hydra.sweeper.params` (a value on the command line wins over the preset's, as in Hydra's sweeper)."""
    if "hydra.mode=RUN" in words:
        return words
    presets = [w.split("=", 1)[1] for w in words if w.startswith("experiment=")]
    params: dict[str, str] = {}
    for name in presets:
        preset = yaml.safe_load((REPO / "conf" / "experiment" / f"{name}.yaml").read_text()) or {}
        params.update({k: str(v) for k, v in ((preset.get("hydra") or {}).get("sweeper") or {}).get("params", {}).items()})
    own = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if "=" in w and _swept(w.split("=", 1)[1])}
    params.update(own)
    keep = {k: v.split(",")[: 2 if i == 0 else 1] for i, (k, v) in enumerate(params.items())}
    out = [f"{w.split('=', 1)[0]}={','.join(keep[w.split('=', 1)[0]])}" if w.split("=", 1)[0] in own else w for w in words]
    return out + [f"{k}={','.join(v)}" for k, v in keep.items() if k not in own]


def shortened(cmd: DocCommand) -> str:
    """The command without its trailing comment, with the small-size arguments appended."""
    words = shlex.split(cmd.text, comments=True, posix=False)
    script = next(w for w in words if w in CONSOLE_SCRIPTS)
    body = " ".join(words)  # for trainer.steps only
    if script == "reasoning-rl-train":
        extra = [*SHORTEN[script], _steps_at_most(body, MAX_STEPS)]
        words = smaller_sweep(words)
    elif script == "reasoning-rl-bench":
        sub = words[words.index(script) + 1]
        extra = [*SHORTEN_BENCH.get(sub, []), "--no-results"]
    else:
        extra = SHORTEN[script]
    # The arguments go before any redirection, pipe or `&` (a page's runs side by side run one at a time here).
    end = next((i for i, w in enumerate(words) if w in ("&", "|", ";", "&&") or re.match(r"^\d?[<>]", w)),
               len(words))
    tail = [w for w in words[end:] if w != "&"]
    return " ".join([*words[:end], *map(shlex.quote, extra), *tail])


def existing_checkpoints(script: str, folder: Path) -> str:
    """``<path>checkpoint-<N>`` -> the newest ``<path>checkpoint-<M>`` there is, when the shortened run (or
    the evaluation of it) stopped before step N: its final checkpoint is the one the page means. A path
    holding a loop's variable (``runs/p$p-s$s/checkpoint-100``) is known only when the loop runs: it becomes
    the shortened run's last checkpoint, ``checkpoint-<min(N, MAX_STEPS)>`` (a checkpoint every 2 steps)."""

    def newest(match: re.Match) -> str:
        prefix, step = match.group(1), match.group(2)
        if prefix.startswith("/") or (folder / f"{prefix}{step}").exists():  # absolute: not a page's run
            return match.group(0)
        if "$" in prefix:
            return f"{prefix}{min(int(step), MAX_STEPS)}"
        steps = [int(p.name.rsplit("-", 1)[1]) for p in folder.glob(f"{prefix}*") if p.name.rsplit("-", 1)[1].isdigit()]
        return f"{prefix}{max(steps)}" if steps else match.group(0)

    return re.sub(r"(?<![\w/$~])([\w./$-]*checkpoint-)(\d+)\b", newest, script)


def with_setup(cmd: DocCommand) -> str:
    """The shortened command inside the loops above it in its block, after the block's assignments and file
    copies; as a sweep, the first loop runs its first two values, every other loop its first."""
    loops = [re.match(r"for (\w+) in (.*?);\s*do\b", line) for line in cmd.setup if line.startswith("for ")]
    heads = [f"for {m.group(1)} in {' '.join(m.group(2).split()[: 2 if i == 0 else 1])}; do" for i, m in enumerate(loops)]
    body = shortened(cmd) + (" || exit $?" if loops else "")
    rest = [line for line in cmd.setup if not line.startswith("for ")]
    return "; ".join([*rest, " ".join([*heads, body]) + "; done" * len(loops)])


def user_files(folder: Path) -> None:
    """The files the pages ask a reader to bring, made up here (their names as the pages write them)."""
    (folder / "notes.txt").write_text("a file where a folder is expected\n")
    stdio = [{"id": "sum", "question": "Print the sum of the two numbers on the line.", "inputs": ["1 2\n"],
              "outputs": ["3\n"]},
             {"id": "reverse", "question": "Print the input line reversed.", "inputs": ["abc\n"], "outputs": ["cba\n"]}]
    for name in ("train.jsonl", "test.jsonl"):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in stdio))
    humaneval = [json.loads(line) for line in (SHARED_DATA / "humaneval.jsonl").read_text().splitlines()[:2]]
    samples = [{"task_id": p["task_id"], "completion": p["canonical_solution"]} for p in humaneval]
    for name in ("samples.jsonl", "completions.jsonl"):
        (folder / name).write_text("".join(json.dumps(s) + "\n" for s in samples))
    # A dataset definition of one's own (docs/tasks.md): arithmetic_wide's, under another name.
    wide = (REPO / "reasoning_rl" / "tasks" / "definitions" / "arithmetic_wide.yaml").read_text()
    (folder / "my_task.yaml").write_text(wide.replace("name: arithmetic_wide", "name: my_task"))
    # Randomly initialised tiny checkpoints saved with save_pretrained (docs/evaluation.md, "End to end").
    for step in (10, 20):
        model, tokenizer = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2,
                                                            intermediate_size=64, init_seed=step))
        model.save_pretrained(folder / "scratch" / "run" / f"checkpoint-{step}")
        tokenizer.save_pretrained(folder / "scratch" / "run" / f"checkpoint-{step}")
    # A suite of one's own (docs/evaluation.md: "copy one, edit it, pass its path"): grade_school's.
    suite = (REPO / "conf" / "eval_suites" / "grade_school.yaml").read_text()
    (folder / "my_suite.yaml").write_text(suite.replace("name: grade_school", "name: my_suite"))


@pytest.fixture(scope="module")
def page_folders():
    """The pages' working folders, removed at the end (each is removed after its page's last command too)."""
    folders: dict[str, Path] = {}
    yield folders
    for folder in folders.values():
        shutil.rmtree(folder.parent, ignore_errors=True)


def page_folder(page: str, folders: dict[str, Path]) -> Path:
    """The page's working folder: ``work/`` beside ``shared/data``, so ``../shared/data`` resolves. Made with
    ``tempfile``, not pytest's ``tmp_path_factory``: another pytest session of the same user keeps only the
    newest 3 base folders and so removed this run's pages mid-run on a shared machine."""
    if page not in folders:
        root = Path(tempfile.mkdtemp(prefix=f"doc-commands-{Path(page).stem}-"))
        (root / "shared").mkdir()
        (root / "shared" / "data").symlink_to(SHARED_DATA)
        (root / "work").mkdir()
        user_files(root / "work")
        folders[page] = root / "work"
    return folders[page]


def test_every_skip_marker_names_a_known_reason():
    unknown = [f"{c.id}: {c.skip!r}" for c in COMMANDS if c.skip is not None and c.skip not in SKIP_REASONS]
    assert not unknown, f"doc-test skip reasons must be one of {sorted(SKIP_REASONS)}: {unknown}"
    unexplained = [c.id for c in COMMANDS if c.skip is not None and not c.skip_why]
    assert not unexplained, f"a skip marker says why after its reason ('skip gpu: <why>'): {unexplained}"


def test_commands_are_collected_from_readme_and_docs():
    pages = {c.page for c in COMMANDS}
    assert "README.md" in pages and len(pages) > 10
    assert any(c.text.split(" #")[0].strip() == "reasoning-rl-train" for c in COMMANDS if c.page == "README.md")


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.skip is None], ids=lambda c: c.id)
def test_placeholders_are_ones_the_test_fills(cmd: DocCommand):
    """A runnable command names a reader's own file by a name the test creates, not by ``<something>``."""
    assert not PLACEHOLDER.findall(cmd.text.split(" #")[0]), (
        f"{cmd.id}: {cmd.text!r} has a placeholder the test cannot fill: write a command that runs "
        f"(a folder an earlier command on the page writes) or mark it '# doc-test: skip <reason>: <why>'")


def pages_left_out(setting: str) -> set[str] | None:
    """The pages ``all,-<page>,...`` leaves out (empty for ``all`` or ``1``); None for a list of pages."""
    items = [item.strip() for item in setting.split(",") if item.strip()]
    if not items or items[0] not in ("1", "all"):
        return None
    return {item[1:] for item in items[1:] if item.startswith("-")}


def runs_page(setting: str, page: str) -> bool:
    """``REASONING_RL_DOC_COMMANDS``: ``1`` or ``all`` (every page), a comma-separated list of pages
    (``README.md,docs/lora.md``), or ``all`` then pages to leave out (``all,-docs/tools.md``: what CI runs,
    .ci/run). The whole set takes over an hour on 2 cores."""
    left_out = pages_left_out(setting)
    if left_out is None:
        return page in {item.strip() for item in setting.split(",")}
    return page not in left_out


def test_runs_page_reads_all_a_list_or_all_but():
    assert runs_page("1", "docs/lora.md") and runs_page("all", "README.md")
    assert runs_page("README.md, docs/lora.md", "docs/lora.md") and not runs_page("README.md", "docs/lora.md")
    assert runs_page("all,-docs/tools.md", "README.md") and not runs_page("all, -docs/tools.md", "docs/tools.md")


def test_the_pages_ci_leaves_out_exist():
    """A page .ci/run names to leave out is a documented page (a renamed page would otherwise run in CI
    unnoticed, or a typo leave one out)."""
    [setting] = re.findall(r"^REASONING_RL_DOC_COMMANDS=(\S+) python", (REPO / ".ci" / "run").read_text(), flags=re.M)
    left_out = pages_left_out(setting)
    assert left_out and left_out <= {c.page for c in COMMANDS}


@pytest.mark.doc_commands
@pytest.mark.skipif(not os.environ.get(RUN_ENV), reason=f"runs every documented command: set {RUN_ENV}=1")
@pytest.mark.skipif(SHARED_DATA is None, reason="../shared/data not found")
@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.skip is None], ids=lambda c: c.id)
def test_doc_command_runs(cmd: DocCommand, page_folders):
    if not runs_page(os.environ[RUN_ENV], cmd.page):
        pytest.skip(f"{cmd.page} is not in {RUN_ENV}={os.environ[RUN_ENV]}")
    folder = page_folder(cmd.page, page_folders)
    script = existing_checkpoints(with_setup(cmd), folder)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    try:
        out = subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=1200)
    finally:
        if cmd == LAST_OF_PAGE[cmd.page]:  # its checkpoints and models: gigabytes a page (22 GB for every page)
            shutil.rmtree(folder.parent, ignore_errors=True)
    tail = (out.stdout + out.stderr)[-3000:]
    assert out.returncode == cmd.expect_exit, f"{cmd.id}: exit {out.returncode}, the page expects " \
        f"{cmd.expect_exit}\n$ {script}\n{tail}"
    if cmd.expect_exit == 2:
        assert out.stderr.strip().splitlines()[-1].split(":")[0] in CONSOLE_SCRIPTS, tail


def test_testing_md_lists_the_skip_reasons():
    """docs/testing.md's table of reasons is SKIP_REASONS, word for word."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    table = re.findall(r"^\| `([\w-]+)` \| (.*?) \|$", text.split("| reason | when |", 1)[1], flags=re.M)
    assert dict(table) == SKIP_REASONS


def test_no_command_hides_in_an_indented_block():
    """An indented code block is not collected: a command shown in one is fenced (```bash) instead."""
    from tests.docs.conftest import documented_pages, fenced_blocks, starts_with_console_script

    hidden = []
    for path in documented_pages():
        lines = path.read_text().splitlines()
        fenced = {n for first, end, _ in fenced_blocks(lines) for n in range(first - 1, end + 1)}
        for n, line in enumerate(lines):
            text = line.strip().removeprefix("$ ")
            if n not in fenced and line.startswith("    ") and starts_with_console_script(text):
                hidden.append(f"{path.name}:{n + 1}")
    assert not hidden, f"commands in indented blocks (fence them as ```bash): {hidden}"


CONFIG_GROUPS = ("algo", "task", "model", "rollout", "experiment", "recipe")


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if re.search(r"reasoning-rl-(train|bench plan)", c.text)
                                 and c.expect_exit == 0],
                         ids=lambda c: c.id)
def test_config_choices_named_by_a_command_exist(cmd: DocCommand):
    """`algo=X`, `task=X`, `model=X`, ... in a training command name a file of conf/<group>/ (or a folder)."""
    for group, value in re.findall(rf"(?<![\w./+~])({'|'.join(CONFIG_GROUPS)})=([\w.-]+)(?=\s|$)", cmd.text):
        for choice in value.split(","):
            known = sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))
            assert choice in known or "/" in choice or "$" in choice, (
                f"{cmd.id}: {group}={choice} is not in conf/{group}/ ({', '.join(known)})")


OUTPUT_DIR = re.compile(r"(?<![\w.])(?:trainer\.output_dir|output_dir)=([^\s;|&]+)")


def test_no_run_command_reads_what_only_a_skipped_command_writes():
    """A runnable command that reads a run folder (``runs/x/checkpoint-60``, ``run_dir=runs/x``) finds it:
    an earlier runnable command on its page writes it. When only a skipped command writes it, the test would
    run the reader against a folder that is not there (the skip marker belongs on the reader too)."""
    wrong = []
    for page in {c.page for c in COMMANDS}:
        runnable = [c for c in COMMANDS if c.page == page and c.skip is None]
        written_by_skipped = {m for c in COMMANDS if c.page == page and c.skip is not None
                              for m in OUTPUT_DIR.findall(c.text)}
        written = {m for c in runnable for m in OUTPUT_DIR.findall(c.text)}
        for c in runnable:
            body = OUTPUT_DIR.sub("", c.text)
            wrong += [f"{c.id} reads {d}" for d in written_by_skipped - written
                      if re.search(rf"(?<![\w./]){re.escape(d)}(?=/|\s|$)", body)]
    assert not wrong, f"these commands read a folder only a skipped command writes; mark them skipped too: {wrong}"
