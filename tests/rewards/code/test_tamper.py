"""Sandbox false negatives (a private temporary directory, a CPU-time limit with a wall-clock
backstop) and the tamper signals an honest program must never raise.

The hostile programs' own flags are checked in test_hostile.py (one program per kind).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import rewards
from rewards.code import FunctionalTests, StdioTests, run_tests_batch
from rewards.code.sandbox import Limits, Sandbox
from rewards.code.sandbox.inside.clock import cpu_seconds, wall_seconds
from rewards.code.sandbox.inside.tamper import KINDS, pass_marker

TEMPFILE_PROGRAM = (
    "import os, tempfile\n"
    "def roundtrip(x):\n"
    "    with tempfile.TemporaryFile() as f:\n"  # anonymous file in the program's private directory
    "        f.write(str(x).encode())\n        f.seek(0)\n        a = f.read().decode()\n"
    "    with tempfile.NamedTemporaryFile('w+', suffix='.txt') as g:\n"
    "        g.write(a)\n        g.flush()\n        b = open(g.name).read()\n"
    "    d = tempfile.mkdtemp()\n"
    "    open(os.path.join(d, 'x'), 'w').write(b)\n"
    "    return open(os.path.join(d, 'x')).read()\n"
)


def test_a_correct_program_using_temporary_files_passes(box: Sandbox) -> None:
    tests = FunctionalTests(asserts=("assert roundtrip(7) == '7'", "assert roundtrip('ab') == 'ab'"))
    result = box.execute(tests.job(TEMPFILE_PROGRAM, 5.0, {}))
    assert (result.status, result.passed, result.total, result.tamper) == ("passed", 2, 2, ())


def test_a_stdio_program_using_a_temporary_file_passes(box: Sandbox) -> None:
    program = "import tempfile\nf = tempfile.TemporaryFile('w+')\nf.write(input())\nf.seek(0)\nprint(f.read()[::-1])\n"
    result = box.execute(StdioTests(cases=(("abc", "cba"),)).job(program, 0, {}))
    assert result.status == "passed"


def test_the_temporary_directory_caps_file_size(box: Sandbox) -> None:
    # RLIMIT_FSIZE = Limits.file_size_mb: writing 2 MiB under a 1 MiB cap fails inside the program.
    program = ("import tempfile\ndef big():\n    try:\n        with tempfile.TemporaryFile() as f:\n"
               "            f.write(b'x' * (2 << 20))\n            f.flush()\n        return 'wrote'\n"
               "    except OSError as e:\n        return type(e).__name__\n")
    job = FunctionalTests(asserts=("assert big() == 'OSError'",)).job(program, 5.0, {"file_size_mb": 1})
    assert box.execute(job).status == "passed"


def test_time_limits_are_cpu_time_with_a_stated_wall_clock_backstop() -> None:
    # 1.5x + 1 s by default: a 5 s limit waits 8.5 s of wall clock; RLIMIT_CPU = ceil(timeout).
    assert wall_seconds(5.0, {}) == 8.5
    assert wall_seconds(1.0, {"wall_clock_factor": 3.0, "wall_clock_slack_s": 0.5}) == 3.5
    assert (cpu_seconds(0.2), cpu_seconds(1.0), cpu_seconds(1.5)) == (1, 1, 2)
    assert Limits().wall_clock_factor == 1.5 and Limits().wall_clock_slack_s == 1.0


def test_a_program_waiting_longer_than_its_cpu_limit_passes_within_the_backstop(box: Sandbox) -> None:
    # 1.2 s of sleeping (no CPU) under a 1 s limit: within the 2.5 s backstop, so judged on its answer.
    program = "import time\ndef slow(x):\n    time.sleep(1.2)\n    return x + 1\n"
    result = box.execute(FunctionalTests(asserts=("assert slow(1) == 2",)).job(program, 1.0, {}))
    assert result.status == "passed"


def test_a_program_sleeping_past_the_backstop_times_out(box: Sandbox) -> None:
    program = "import time\ndef slow(x):\n    time.sleep(30)\n    return x + 1\n"
    start = time.monotonic()
    result = box.execute(FunctionalTests(asserts=("assert slow(1) == 2",)).job(program, 0.5, {}))
    assert result.status == "timeout"
    assert time.monotonic() - start < wall_seconds(0.5, {}) + 3


def test_a_busy_loop_is_stopped_by_its_cpu_limit(box: Sandbox) -> None:
    program = "def spin():\n    while True:\n        pass\n"
    result = box.execute(FunctionalTests(asserts=("assert spin() == 1",)).job(program, 1.0, {}))
    assert result.status == "timeout"


@pytest.mark.parametrize(("stdout", "expected"), [
    ("passed\n", True),
    ("All tests passed!\n", True),
    ("3 tests passed\n", True),
    ('{"status": "passed", "passed": 1}\n', True),
    ("OK\n", True),
    ("", False),
    ("42\n[1, 2, 3]\n", False),
    ("the password is ok for now\n", False),  # 'ok' inside a sentence is not a report
    ("bypassed\n", False),
])
def test_pass_marker_table(stdout: str, expected: bool) -> None:
    assert pass_marker(stdout) is expected


def test_the_verifier_reports_tamper_kinds_in_its_info() -> None:
    verifier = rewards.get_verifier("code")
    honest = verifier("def add(a, b):\n    return a + b\n", None, test_list=["assert add(1, 2) == 3"])
    assert (honest.score, "tamper" in honest.info) == (1.0, False)
    cheat = verifier("import sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n", None, test_list=["assert add(1, 2) == 3"])
    assert (cheat.score, cheat.info["tamper"]) == (0.0, ["early_exit"])
    assert set(cheat.info["tamper"]) <= set(KINDS)


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_no_tamper_flag_on_a_sample_of_reference_solutions(shared_data_dir: Path) -> None:
    # The full run (all 164 HumanEval, 427 + 974 MBPP references) is test_all_references_pass_and_stubs_fail.
    from benchmarks.perf.code_exec import humaneval_programs, mbpp_programs

    items = (humaneval_programs(_read(shared_data_dir / "humaneval.jsonl"))["reference"][::8]
             + mbpp_programs(_read(shared_data_dir / "mbpp.jsonl"))["reference"][::40])
    results = run_tests_batch([p for p, _, _ in items], [t for _, t, _ in items], 30.0)
    assert [r.status for r in results] == ["passed"] * len(items)
    assert [r.tamper for r in results if r.tamper] == []


def test_tamper_penalty_replaces_the_score_of_a_flagged_program() -> None:
    # The program passes its test (add is right) but prints a fake report: penalised to -1.
    program = "def add(a, b):\n    return a + b\nprint('All tests passed')\n"
    verifier = rewards.get_verifier("code", tamper_penalty=-1.0)
    result = verifier(program, None, test_list=["assert add(1, 2) == 3"])
    assert (result.score, result.info["status"], result.info["tamper"]) == (-1.0, "passed", ["pass_marker"])
    assert verifier("def add(a, b):\n    return a + b\n", None, test_list=["assert add(1, 2) == 3"]).score == 1.0
    with pytest.raises(ValueError, match="tamper_penalty"):
        rewards.get_verifier("code", tamper_penalty=float("nan"))
