"""The environment registry: by name, by entry point, loud on duplicates, unknown names and bad options."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from reasoning_rl import registry
from reasoning_rl.envs import (
    Environment,
    EnvironmentNotFoundError,
    EnvironmentOptionsError,
    StepResult,
    get_environment,
    list_environments,
    register_environment,
    unregister_environment,
)
from reasoning_rl.envs import registry as reg
from reasoning_rl.envs.python_tool import PythonTool, last_python_block, truncate, without_sandbox_frames
from reasoning_rl.errors import UserError


class Echo(Environment):
    stop = ("\n",)

    def __init__(self, shout: bool = False) -> None:
        self.shout = shout

    def step(self, model_text: str) -> StepResult:
        return StepResult(observation=model_text.upper() if self.shout else model_text, done=len(model_text) > 3)


@pytest.fixture
def echo():
    register_environment("echo_test")(Echo)
    yield
    unregister_environment("echo_test")


def test_register_and_build_with_options(echo):
    env = get_environment("echo_test", shout=True)
    assert isinstance(env, Echo) and env.shout
    assert env.step("ab") == StepResult(observation="AB", done=False)
    assert get_environment("echo_test") is not get_environment("echo_test")  # a fresh one per episode
    assert "echo_test" in list_environments() and "python_tool" in list_environments()


def test_duplicate_name_is_an_error(echo):
    class Other(Echo):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register_environment("echo_test")(Other)
    with pytest.raises(TypeError, match="subclass"):
        register_environment("not_an_env")(object)


def test_unknown_name_lists_the_known_ones_with_close_matches():
    with pytest.raises(EnvironmentNotFoundError, match="Did you mean 'python_tool'") as err:
        get_environment("python_tol")
    assert isinstance(err.value, UserError)


def test_bad_options_name_the_accepted_ones(echo):
    with pytest.raises(EnvironmentOptionsError, match=r"no option\(s\) \['loud'\].*accepts \['shout'\]"):
        get_environment("echo_test", loud=True)


def test_entry_point_plugin(monkeypatch):
    ep = EntryPoint(name="echo_plugin", value=f"{__name__}:Echo", group=reg.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep] if group == reg.ENTRY_POINT_GROUP else [])
    try:
        reg.reload_entry_points()
        assert isinstance(get_environment("echo_plugin"), Echo)
    finally:
        unregister_environment("echo_plugin")


@pytest.mark.parametrize(("text", "code"), [
    ("```python\nprint(1)\n```\n", "print(1)\n"),
    ("```python\nx = 1\n```\nthen\n```python\nprint(2)\n```\n", "print(2)\n"),  # the last block runs
    ("```python\nprint(1)\n", None),  # not closed
    ("no code at all", None),
])
def test_last_python_block(text, code):
    assert last_python_block(text) == code


def test_truncate_states_the_cut():
    assert truncate("abcdef", 6) == "abcdef"
    assert truncate("abcdefgh", 3) == "abc[... 5 more characters cut]"


@pytest.mark.parametrize("runner_source", [False, True], ids=["runner source unreadable", "runner source shown"])
def test_the_sandbox_runners_frame_leaves_the_traceback_whole(runner_source):
    """Inside bubblewrap Python cannot read the runner's source, so its frame is one line; without it
    (a machine with no bwrap) the source line and its markers follow. Either way only the program's
    frames and the error are left."""
    runner = ['  File "/tmp/x/rewards/code/sandbox/inside/candidate.py", line 132, in _run_stdio_program\n']
    if runner_source:
        runner += ['    exec(compile(program, "<program>", "exec"), {"__name__": "__main__"})\n',
                   "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"]
    program = ['  File "<program>", line 2, in <module>\n', "    f()\n",
               '  File "<program>", line 1, in f\n', "    def f(): return 1 / 0\n"]
    stderr = "".join(["Traceback (most recent call last):\n", *runner, *program,
                      "ZeroDivisionError: division by zero\n", "    indented output the program wrote\n"])
    assert without_sandbox_frames(stderr) == "".join(["Traceback (most recent call last):\n", *program,
                                                      "ZeroDivisionError: division by zero\n",
                                                      "    indented output the program wrote\n"])


def test_python_tool_runs_the_block_in_the_sandbox():
    env = PythonTool(timeout=2.0)
    ok = env.step("Let me compute.\n```python\nprint(123 * 456)\n```\n")
    assert ok == StepResult(observation="\n56088\n```\n", done=False, tool="ok")
    err = env.step("```python\n1 / 0\n```\n")
    assert err.tool == "error" and err.observation == ('\nTraceback (most recent call last):\n'
                                                       '  File "<program>", line 1, in <module>\n'
                                                       'ZeroDivisionError: division by zero\n```\n')
    missing = env.step("I will not write code.\n")
    assert missing.tool == "error" and "no ```python block" in missing.observation
    with pytest.raises(ValueError, match="timeout"):
        PythonTool(timeout=0)
