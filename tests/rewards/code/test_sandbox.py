"""Formats, statuses, partial credit, extraction, the verifier contract, the references."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import rewards
from rewards.code import (
    FunctionalTests,
    StdioTests,
    build,
    extract_code,
    isolation_level,
    run_tests,
    run_tests_batch,
)
from rewards.code.sandbox import Sandbox, SandboxError, detect_isolation


def level_or_skip(level: str) -> str:
    """The level, or skip the test when it does not work here (bwrap not installed...)."""
    try:
        return detect_isolation(level)
    except SandboxError as exc:
        pytest.skip(str(exc))


ADD = "def add(a, b):\n    return a + b\n"


def test_mbpp_style_asserts_and_partial_count(box: Sandbox) -> None:
    tests = FunctionalTests(asserts=("assert add(1, 2) == 3", "assert add('a', 'b') == 'ab'", "assert add(1, 1) == 3"))
    result = box.execute(tests.job(ADD, 5.0, {}))
    assert (result.status, result.passed, result.total) == ("failed", 2, 3)


def test_humaneval_style_check_counts_each_assert(box: Sandbox) -> None:
    prompt = "def inc(x):\n    \"\"\"x + 1\"\"\"\n"
    check = "def check(candidate):\n    assert candidate(1) == 2\n    for x in range(3):\n        assert candidate(x) == x + 1\n    assert candidate(0) == 5\n"
    program, tests = build("    return x + 1\n", {"prompt": prompt, "test": check, "entry_point": "inc"})
    result = box.execute(tests.job(program, 5.0, {}))
    # three top-level statements hold asserts: the first two pass, the last fails
    assert (result.status, result.passed, result.total) == ("failed", 2, 3)


def test_prompt_helpers_stay_trusted(box: Sandbox) -> None:
    # HumanEval/32 pattern: the test calls `poly` from the prompt; a completion redefining it
    # to return 0 must not make a wrong root pass.
    prompt = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\ndef find_zero(xs):\n    \"\"\"root\"\"\"\n"
    check = "def check(candidate):\n    assert abs(poly([-2, 1], candidate([-2, 1]))) < 1e-6\n"
    cheat = "def poly(xs, x):\n    return 0\ndef find_zero(xs):\n    return 123.0\n"
    program, tests = build(cheat, {"prompt": prompt, "test": check, "entry_point": "find_zero"})
    assert box.execute(tests.job(program, 5.0, {})).status == "failed"
    program, tests = build("    return 2.0\n", {"prompt": prompt, "test": check, "entry_point": "find_zero"})
    assert box.execute(tests.job(program, 5.0, {})).status == "passed"


def test_mbpp_function_named_like_a_builtin_and_setup_objects(box: Sandbox) -> None:
    program, tests = build("def sum(a, b):\n    return a * b\n", {"test_list": ["assert sum(3, 4) == 12"]})
    assert box.execute(tests.job(program, 5.0, {})).status == "passed"
    code = "class Node:\n    def __init__(self, v):\n        self.v = v\n        self.left = None\ndef depth(n):\n    return 0 if n is None else 1 + depth(n.left)\n"
    program, tests = build(code, {"test_list": ["assert depth(root) == 2"],
                                  "test_setup_code": "root = Node(1)\nroot.left = Node(2)"})
    assert box.execute(tests.job(program, 5.0, {})).status == "passed"


def test_modules_the_tests_borrow_are_the_harness_own(box: Sandbox) -> None:
    # MBPP asserts use `math`/`sys` that only the program imported: the harness imports its own
    # copy, and only of the standard-library module of that very name.
    tests = FunctionalTests(asserts=("assert math.isclose(f(), 2.5)",))
    assert box.execute(tests.job("import math\ndef f():\n    return 2.5", 5.0, {})).status == "passed"
    assert box.execute(tests.job("import cmath as math\ndef f():\n    return 2.5", 5.0, {})).status == "failed"
    fake = "class M:\n    def isclose(self, *a): return True\nmath = M()\ndef f():\n    return 9.0"
    assert box.execute(tests.job(fake, 5.0, {})).status == "failed"


def test_stdio_cases_each_a_fresh_process(box: Sandbox) -> None:
    program = "a, b = map(int, input().split())\nprint(a + b)\n"
    tests = StdioTests(cases=(("1 2\n", "3\n"), ("2 2", "5"), ("5 5", "10  \n\n")), case_timeout=2.0)
    result = box.execute(tests.job(program, 0, {}))
    assert (result.status, result.passed, result.total) == ("failed", 2, 3)
    assert [c["passed"] for c in result.cases] == [True, False, True]


def test_stdio_per_case_timeout_and_crash(box: Sandbox) -> None:
    program = "n = int(input())\nif n == 1:\n    while True: pass\nif n == 2:\n    raise ValueError\nprint(n)\n"
    tests = StdioTests(cases=(("1", "1"), ("2", "2"), ("3", "3")), case_timeout=1.0)
    start = time.monotonic()
    result = box.execute(tests.job(program, 0, {}))
    assert time.monotonic() - start < 5
    assert [c["status"] for c in result.cases] == ["timeout", "exited", "exited"]
    assert [c["passed"] for c in result.cases] == [False, False, True]  # a crash fails even with output
    assert result.status == "timeout"


def test_each_program_starts_in_an_empty_directory_of_its_own(box: Sandbox) -> None:
    # The directory's path is the same for every program of a sandbox (prepared once in P); it is
    # recreated empty before each one, and is the program's cwd, $HOME and $TMPDIR.
    writer = ("import os, tempfile\ndef f():\n    open('left.txt', 'w').write('x')\n"
              "    os.mkdir('sub')\n    open('sub/deep.txt', 'w').write('y')\n"
              "    tempfile.mkstemp()\n    return sorted(os.listdir('.'))\n")
    reader = ("import os, tempfile\ndef f():\n    return [os.listdir('.'), os.getcwd() == os.environ['HOME'] == "
              "os.environ['TMPDIR'] == tempfile.gettempdir()]\n")
    first = box.execute(FunctionalTests(asserts=("assert len(f()) == 3",)).job(writer, 5.0, {}))
    second = box.execute(FunctionalTests(asserts=("assert f() == [[], True]",)).job(reader, 5.0, {}))
    assert (first.status, second.status) == ("passed", "passed"), (first.detail, second.detail)


def test_programs_get_their_own_random_seed_and_installed_packages(box: Sandbox) -> None:
    # Each program's `random` is seeded afresh (C is forked without Python's at-fork handlers);
    # the site-packages folders are importable (the jail runs without `site`, they are added).
    program = "import random\ndef f():\n    return random.random()\n"
    values = {  # the message is the value: "AssertionError: 0.41..."
        box.execute(FunctionalTests(asserts=("assert f() < 0, f()",)).job(program, 5.0, {})).detail
        for _ in range(3)
    }
    assert len(values) == 3, values
    if box.level != "rlimits":  # there, C cannot read a Python under a private home (docs/code_sandbox.md)
        uses_pytest = "import pytest\ndef f():\n    return pytest.__name__\n"
        result = box.execute(FunctionalTests(asserts=("assert f() == 'pytest'",)).job(uses_pytest, 5.0, {}))
        assert result.status == "passed", result.detail


@pytest.mark.parametrize(("completion", "mode", "expected"), [
    ("text\n```python\ndef a(): pass\n```\nmore\n```python\ndef b(): pass\n```", "last_block", "def b(): pass\n"),
    ("```\nx = 1\n```", "last_block", "x = 1\n"),
    ("```python\nx = 1\n", "last_block", "x = 1\n"),  # cut at the length limit
    ("no code here", "last_block", None),
    ("    return x\n", "raw", "    return x\n"),
    ("    return x\n", "auto", "    return x\n"),
    ("see ```js\nlet a;\n```", "auto", None),
])
def test_extract_code(completion: str, mode: str, expected: str | None) -> None:
    assert extract_code(completion, mode) == expected


def test_verifier_partial_credit_all_or_nothing_and_unscorable() -> None:
    fields = {"test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]}
    completion = f"Here:\n```python\n{ADD}```"
    assert rewards.get_verifier("code")(completion, None, **fields).score == 0.0
    partial = rewards.get_verifier("code", partial_credit=True)(completion, None, **fields)
    assert (partial.status, partial.score, partial.info["passed"]) == ("ok", 0.5, 1)
    # extract="auto" without a fence takes the completion as the program (raw): "no code" is a
    # program that fails to load, scored 0 -- the model's fault, not an unscorable sample.
    no_code = rewards.get_verifier("code")("no code", None, **fields)
    assert (no_code.status, no_code.score, no_code.info["status"]) == ("ok", 0.0, "error")
    assert rewards.get_verifier("code", extract="last_block")("no code", None, **fields).status == "unscorable"
    assert rewards.get_verifier("code")(completion, None).status == "unscorable"  # no test fields
    looping = rewards.get_verifier("code", timeout=1.0)("def add(a, b):\n    while True: pass", None, **fields)
    assert (looping.status, looping.score, looping.info["status"]) == ("ok", 0.0, "timeout")


def test_verifier_field_mapping_for_each_format() -> None:
    verifier = rewards.get_verifier("code", partial_credit=True)
    humaneval = {"prompt": "def inc(x):\n    \"\"\"x + 1\"\"\"\n", "entry_point": "inc",
                 "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n"}
    body = "    return x + 1\n"  # base-model continuation of the prompt
    chat = "Sure:\n```python\ndef inc(x):\n    return x + 1 if x < 3 else 0\n```"  # a full function
    assert verifier(body, None, **humaneval).score == 1.0
    assert verifier(chat, humaneval).score == 0.5  # the row as `reference` works too
    stdio = {"inputs": ["3\n", "4\n"], "outputs": ["9\n", "16\n"]}
    assert verifier("print(int(input()) ** 2)", None, **stdio).score == 1.0
    assert verifier("print(9)", None, **stdio).score == 0.5


def test_verifier_in_score_batch_worker() -> None:
    fields = [{"test_list": ["assert add(1, 2) == 3"]}] * 3
    out = rewards.score_batch(rewards.get_verifier("code"), [ADD, "def add(a, b):\n    return 0", "syntax error("],
                              [None] * 3, fields, timeout=30)
    assert out.scores == [1.0, 0.0, 0.0]


def test_run_tests_api_and_batch_order() -> None:
    assert run_tests(ADD, tests=FunctionalTests(asserts=("assert add(1, 2) == 3",))).status == "passed"
    programs = [f"def f():\n    return {i}\n" for i in range(6)]
    tests = [FunctionalTests(asserts=(f"assert f() == {i % 2}",)) for i in range(6)]
    assert [r.status for r in run_tests_batch(programs, tests, num_workers=2)] == ["passed" if i < 2 else "failed" for i in range(6)]
    assert isolation_level() in ("bwrap", "unshare", "rlimits")


@pytest.mark.parametrize("level", ["unshare", "rlimits"])
def test_forced_fallback_levels_run_programs(level: str) -> None:
    level_or_skip(level)
    with Sandbox(level) as sandbox:
        assert sandbox.level == level
        result = sandbox.execute(FunctionalTests(asserts=("assert add(1, 2) == 3",)).job(ADD, 5.0, {}))
        assert result.status == "passed"
        result = sandbox.execute(FunctionalTests(asserts=("assert f() == 1",)).job("def f():\n    while True: pass", 1.0, {}))
        assert result.status == "timeout"


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_all_references_pass_and_stubs_fail(shared_data_dir: Path) -> None:
    from benchmarks.perf.code_exec import humaneval_programs, mbpp_programs

    suites = [humaneval_programs(_read(shared_data_dir / "humaneval.jsonl")),
              mbpp_programs(_read(shared_data_dir / "mbpp_sanitized.jsonl")),
              mbpp_programs(_read(shared_data_dir / "mbpp.jsonl"))]
    # One batch, so the slow ones (MBPP/123 takes ~10 s of CPU) overlap the rest.
    items = [(kind, *item) for kinds in suites for kind in ("reference", "pass") for item in kinds[kind]]
    results = run_tests_batch([p for _, p, _, _ in items], [t for _, _, t, _ in items], 30.0)
    bad = [(kind, meta.get("task_id") or meta["problem"]["task_id"], r.status, r.detail[:80])
           for (kind, _, _, meta), r in zip(items, results) if (r.status == "passed") != (kind == "reference")]
    assert not bad, bad[:10]
    assert sum(kind == "reference" for kind, *_ in items) == 164 + 427 + 974
    # No reference solution is flagged as tampering (rewards/code/sandbox/inside/tamper.py).
    flagged = [(meta.get("task_id") or meta["problem"]["task_id"], r.tamper)
               for (kind, _, _, meta), r in zip(items, results) if kind == "reference" and r.tamper]
    assert not flagged, flagged[:10]
