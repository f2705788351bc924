"""``python_tool``: the policy runs Python while it reasons (tool-integrated reasoning, ToRA-style).

A turn that ends with a ```python block followed by the stop marker ```output is run in the code
sandbox (:mod:`rewards.code.sandbox`: same jail, CPU/wall time, memory and output limits as the
code verifier); its stdout and stderr come back as the observation, which closes the output block::

    ```python
    print(123 * 456)
    ```
    ```output                      <- the policy's turn ends here (stop marker)
    56088                          <- observation (tokenized, never trained on)
    ```
    The answer is 56088.           <- the next turn

Output longer than ``max_output_chars`` is cut, and the cut is stated in the observation
(``[... N more characters cut]``). A turn without a stop marker (EOS, or the model just answers)
ends the episode. The final answer is scored by the task's own verifier on the whole episode text
(the reward pipeline does not change).
"""

from __future__ import annotations

import copy
import re
import threading
from typing import Any

from reasoning_rl.envs.base import Environment, StepResult, ToolStatus
from reasoning_rl.envs.registry import register_environment

STOP = "```output"
CUT_MARKER = "[... {n} more characters cut]"
"""Stated in the observation where output was cut (``n``: characters dropped)."""

_SANDBOX_FRAME = re.compile(r'  File ".*/inside/candidate\.py", ')
"""A traceback line of the sandbox's candidate runner (its path differs by isolation level)."""
_BLOCK = re.compile(r"```python[ \t]*\n(.*?)```", re.DOTALL)
_OBSERVATION = re.compile(re.escape(STOP) + r"(\n.*?\n```(?:\n|$))", re.DOTALL)
"""What :meth:`PythonTool.step` appends after the stop marker: a newline, the output, the closing fence."""


def without_sandbox_frames(stderr: str) -> str:
    """``stderr`` with the sandbox's own frame (its candidate runner) taken out of tracebacks: its
    ``  File ".../inside/candidate.py", ...`` line and the lines under it that Python indents further
    (the source line and its ``^^^`` markers, printed where the runner's source can be read: without
    bubblewrap, not inside it). The program's own frames and the error stay."""
    kept: list[str] = []
    in_sandbox_frame = False
    for line in stderr.splitlines(keepends=True):
        if _SANDBOX_FRAME.match(line):
            in_sandbox_frame = True
            continue
        if in_sandbox_frame and line.startswith("    "):
            continue
        in_sandbox_frame = False
        kept.append(line)
    return "".join(kept)


_sandboxes: dict[str | None, Any] = {}
_lock = threading.Lock()


def shared_sandbox(isolation: str | None = None) -> Any:
    """One sandbox per isolation level and process, started on first use and reused by every episode
    (each program still runs in a fresh process inside it)."""
    from rewards.code.sandbox import Sandbox

    with _lock:
        if isolation not in _sandboxes:
            _sandboxes[isolation] = Sandbox(isolation)
        return _sandboxes[isolation]


def last_python_block(text: str) -> str | None:
    """The code of the last closed ```python block of ``text``, or None."""
    blocks = _BLOCK.findall(text)
    return blocks[-1] if blocks else None


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to its first ``max_chars`` characters, with the cut stated (:data:`CUT_MARKER`)."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + CUT_MARKER.format(n=len(text) - max_chars)


def output_observation(output: str, max_output_chars: int) -> str:
    """The observation after the stop marker for a program that wrote ``output`` (stdout then stderr):
    a newline, the output without its trailing newlines, cut at ``max_output_chars`` (:func:`truncate`),
    the closing fence and its newline."""
    return "\n" + truncate(output.rstrip("\n"), max_output_chars) + "\n```\n"


@register_environment("python_tool")
class PythonTool(Environment):
    """Runs the last ```python block of each turn in the code sandbox; the observation is its output."""

    stop = (STOP,)

    def __init__(self, timeout: float = 5.0, max_output_chars: int = 400, isolation: str | None = None,
                 sandbox: Any = None) -> None:
        """``timeout``: CPU seconds per program (the sandbox's wall-clock backstop follows it);
        ``max_output_chars``: longest observation text before the stated cut; ``isolation``: the
        sandbox level (None = the strongest this machine offers); ``sandbox``: a
        :class:`rewards.code.sandbox.Sandbox` to use instead of the shared one."""
        if timeout <= 0:
            raise ValueError(f"python_tool timeout must be > 0 seconds, got {timeout}")
        if max_output_chars < 1:
            raise ValueError(f"python_tool max_output_chars must be >= 1, got {max_output_chars}")
        self.timeout = float(timeout)
        self.max_output_chars = int(max_output_chars)
        self.isolation = isolation
        self._sandbox = sandbox

    def fork(self) -> PythonTool:
        """A copy that shares the sandbox: the tool keeps no state between turns beyond its options."""
        return copy.copy(self)

    def step(self, model_text: str) -> StepResult:
        code = last_python_block(model_text)
        if code is None:  # the turn asked for output (stop marker) without a closed ```python block
            return StepResult(observation=f"\nno ```python block to run before {STOP}\n```\n", tool="error")
        output, status = self.run(code)
        return StepResult(observation=output_observation(output, self.max_output_chars), tool=status)

    def observation_spans(self, text: str) -> list[tuple[int, int]]:
        """Each output block after its ```output marker: the newline, the output, the closing fence and its
        newline, what :meth:`step` returns as the observation."""
        return [m.span(1) for m in _OBSERVATION.finditer(text)]

    def run(self, code: str) -> tuple[str, ToolStatus]:
        """Run ``code`` as a program (empty stdin): (stdout then stderr, status)."""
        from rewards.code.formats import StdioTests

        box = self._sandbox if self._sandbox is not None else shared_sandbox(self.isolation)
        # One stdin/stdout case whose expected output is never compared by us: only the program's
        # own stdout/stderr and exit status are read back.
        result = box.execute(StdioTests(cases=(("", ""),), case_timeout=self.timeout).job(code, self.timeout, {}))
        if result.status == "timeout":
            return f"TimeoutError: the program ran past {self.timeout:g} s and was killed", "timeout"
        text = (result.stdout + without_sandbox_frames(result.stderr)).rstrip("\n")
        exit_code = result.cases[0].get("exit") if result.cases else None
        return text, "ok" if exit_code == 0 and result.status != "error" else "error"
