"""Figures the docs state that a test can recompute cheaply: the shipped dataset definitions (names, versions,
split sizes), the default run as the README and docs/main_job.md describe it, the presets the README's table
names, the planner's predictions in docs/memory.md (docs/testing.md, "Figures a test can recompute")."""

from __future__ import annotations

import re

import pytest
import yaml

from benchmarks.perf.plan import compose_train_config
from benchmarks.perf.plan import run as plan
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.planner import log_plan
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
def test_tasks_md_versions_and_split_sizes(row):
    """docs/tasks.md's version column, and each split's size where the row states it (`train` (7,473),
    `test` (the 82 held-out problems), `train` (4,000 rows ...), but not a split the hub alone holds)."""
    for name in re.findall(r"`(\w+)`", row[0]):
        definition = get_definition(name)
        assert str(definition.version) == row[1], f"{name}: docs/tasks.md says version {row[1]}"
        for split in ("train", "test"):
            stated = re.search(rf"`{split}` \((?:the )?(\d[\d,]*\d|\d)([^)]*)\)", row[2])
            if stated and not stated.group(2).startswith(("-", ", hub only")):
                problems, _ = load_problems(definition, split, data_dir=SHARED_DATA, unique_ids=False)
                assert len(problems) == int(stated.group(1).replace(",", "")), f"{name}: docs/tasks.md says {stated[0]}"


def test_tasks_md_example_definition_is_the_shipped_file():
    """The definition docs/tasks.md shows under "Keys of a definition" is the shipped file's content."""
    text = (REPO / "docs" / "tasks.md").read_text().split("## Keys of a definition", 1)[1]
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = REPO / block.splitlines()[0].removeprefix("# ")
    assert yaml.safe_load(block) == yaml.safe_load(path.read_text()), f"docs/tasks.md's example differs from {path}"


@pytest.mark.skipif(SHARED_DATA is None, reason="../shared/data not found")
@pytest.mark.parametrize("name", list_definitions())
def test_split_descriptions_count_their_rows(name):
    """A split's `description` that counts its problems ("GSM8K test, 1,319 problems", quoted by error messages
    and docs/tasks.md) matches its local file, where ../shared/data holds it."""
    definition = get_definition(name)
    for split, source in definition.splits.items():
        stated = re.search(r"([\d,]+) problems", source.description or "")
        if stated and source.local_file and (SHARED_DATA / source.local_file).is_file():
            problems, _ = load_problems(definition, split, data_dir=SHARED_DATA, unique_ids=False)
            assert len(problems) == int(stated.group(1).replace(",", "")), f"{name}[{split}]: {source.description}"


def test_readme_and_main_job_describe_the_default_run():
    """The default run (`reasoning-rl-train`) as README.md's "What the main job prints" and docs/main_job.md
    describe it: its problems, model, batch, steps and warm start, from the composed config."""
    cfg = compose_train_config([])
    definition = get_definition(cfg.task.name)
    train, _ = load_problems(definition, definition.train_split, unique_ids=False)
    held_out, _ = load_problems(definition, definition.eval_split)
    distinct_train = len({p.task_id for p in train})
    readme = " ".join((REPO / "README.md").read_text().split())
    main_job = " ".join((REPO / "docs" / "main_job.md").read_text().split())
    batch = (cfg.algo.prompts_per_step, cfg.algo.group_size)
    warm = round(100 * cfg.warmstart.stop_at_accuracy)
    expected = [  # (page, a pattern of its text, the numbers the pattern captures)
        (readme, r"(\d+) training and (\d+) held-out problems", (distinct_train, len(held_out))),
        (main_job, r"(\d+) training / (\d+) held-out problems", (distinct_train, len(held_out))),
        (readme, r"GRPO with (\d+) prompts x (\d+) samples per step", batch),
        (main_job, r"GRPO with (\d+) prompts x (\d+) samples per step", batch),
        (readme, r"\*\*GRPO\*\*, (\d+) steps", (cfg.trainer.steps,)),
        (readme, r"reaches (\d+)%, so RL starts", (warm,)),
        (main_job, r"hidden (\d+), (\d+) layers", (cfg.model.tiny.hidden_size, cfg.model.tiny.num_layers)),
        (main_job, r"greedy accuracy on (\d+) training problems reaches (\d+)%", (cfg.warmstart.probe_size, warm)),
        (main_job, r"decay with (\d+) warmup steps and (\d+) GRPO steps", (cfg.algo.lr_warmup_steps, cfg.trainer.steps)),
    ]
    for text, pattern, values in expected:
        found = re.search(pattern, text)
        assert found, f"not found: {pattern}"
        assert tuple(int(v) for v in found.groups()) == values, f"{found[0]!r}: the default run has {values}"
    assert cfg.warmstart.enabled and "a 1M-parameter" in readme
    assert round(plan(["--device-gb", "1"]).figures["parameters"] / 1e6) == 1  # "a 1M-parameter ... model"


def test_readme_table_names_every_algorithm_preset():
    readme = (REPO / "README.md").read_text()
    table = readme.split("## Which preset for what", 1)[1].split("\n## ", 1)[0]
    presets = sorted(p.stem for p in (REPO / "conf" / "algo").glob("*.yaml"))
    missing = [p for p in presets if f"`{p}`" not in table and f"algo={p}`" not in table]
    assert not missing, f"README's 'Which preset for what' does not name these conf/algo presets: {missing}"
    goals = [row.split("|")[1] for row in table.splitlines() if row.startswith("| ")]
    named = {n for goal in goals for n in re.findall(r"`(\w+)`", goal)}
    assert named <= set(presets), f"the goal column names presets conf/algo/ lacks: {sorted(named - set(presets))}"
    for experiment in re.findall(r"experiment=(\w+)", table):
        assert (REPO / "conf" / "experiment" / f"{experiment}.yaml").is_file(), experiment


def _plan_commands() -> dict[str, list[str]]:
    """experiment -> the arguments of docs/memory.md's `reasoning-rl-bench plan experiment=<it> ...` line."""
    text = (REPO / "docs" / "memory.md").read_text().replace("\\\n", " ")
    lines = re.finditer(r"^HF_HUB_OFFLINE=1 reasoning-rl-bench plan (experiment=(\w+) .*)$", text, flags=re.M)
    return {m.group(2): m.group(1).split() for m in lines}


def _preset_rows() -> list[tuple[str, list[str], list[str]]]:
    """(experiment, the row's own overrides, row) for each row of docs/memory.md's table of shipped presets that
    its command reproduces: "`experiment=X` as shipped", and the rows below it that say "the same" (with
    "`key=value`" overrides). A row "the preset before this change" states a past preset's settings in words:
    quoted, not run."""
    rows, shipped = [], None
    for row in _table_rows((REPO / "docs" / "memory.md").read_text(), "| model (prompt tokens) |"):
        settings = row[1]
        if settings.endswith("as shipped"):
            shipped = settings.split("`")[1].removeprefix("experiment=")
        elif not settings.startswith("the same"):
            shipped = None
        if shipped:
            rows.append((shipped, re.findall(r"`([\w.]+=[^`\s]+)`", settings.removesuffix("as shipped")), row))
    return rows


@pytest.mark.parametrize(("experiment", "overrides", "row"), _preset_rows(),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_memory_md_planner_predictions(experiment, overrides, row):
    """Every column of a row of docs/memory.md's preset table, as the planner prints it for the page's command
    (at the row's device size, with the row's overrides): state, activations, LM head, peak and its phase
    (to 0.1 GB), whether it fits, the largest micro-batch."""
    words = _plan_commands()[experiment]
    words[words.index("--device-gb") + 1] = row[2]
    figures = plan([*words, *overrides]).figures
    gb = figures["components_gb"]
    state = sum(gb[k] for k in ("weights", "reference", "gradients", "optimiser states"))
    part = {prefix: next(v for k, v in gb.items() if k.startswith(prefix)) for prefix in ("activations", "LM head")}
    stated_peak, phase = re.match(r"([\d.]+) \((\w+)\)", row[6]).groups()
    assert [float(row[3]), float(row[4]), float(row[5].split()[0]), float(stated_peak)] == [
        round(state, 1), round(part["activations"], 1), round(part["LM head"], 1), round(figures["peak_gb"], 1)], row
    assert (phase, row[7], int(row[8])) == (figures["phase"], "yes" if figures["fits"] else "no",
                                             figures["largest_micro_batch"]), row


def test_memory_md_default_run_header_line():
    """docs/memory.md's `memory plan:` line of the default run, as the trainer's header computes it (the tiny
    model, the longest of its first training prompts): the device is the RAM of the machine it names."""
    line = re.search(r"^memory plan: peak ([\d.]+) GB \((\w+)\) of [\d.]+ GB RAM: fits; micro-batch (\d+) rows, "
                     r"largest that fits (\d+)", (REPO / "docs" / "memory.md").read_text(), flags=re.M)
    cfg = compose_train_config([])
    definition = get_definition(cfg.task.name)
    problems, _ = load_problems(definition, definition.train_split, unique_ids=False)
    model, tokenizer = build_tiny_model(cfg.model.tiny)
    header = log_plan(cfg, model, tokenizer, [p.prompt for p in problems])
    assert line.groups() == (f"{header.peak_bytes / 1024 ** 3:.2f}", header.phase, str(header.workload.micro_batch_rows),
                             str(header.largest_micro_batch))


def test_algorithms_md_counts_the_grpo_presets():
    """docs/algorithms.md's "N presets" of the grpo module is the number of rows of its generated table."""
    text = (REPO / "docs" / "algorithms.md").read_text()
    table = text.split("<!-- grpo presets: begin -->", 1)[1].split("<!-- grpo presets: end -->", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `") and not line.startswith("| `algo=`")]
    assert re.search(r"\| `grpo` \| `reasoning_rl/algo/grpo.py` \| (\d+) presets", text).group(1) == str(len(rows))


def test_index_lists_every_page_once():
    index = (REPO / "docs" / "index.md").read_text()
    linked = re.findall(r"^- \[(\w+\.md)\]\(\1\): ", index, flags=re.M)
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "index.md")
    assert sorted(linked) == pages
