"""``code_feedback``: the policy writes a solution, sees which tests failed and how, and tries again.

For code tasks (``code_synthetic``, ``mbpp``, ``humaneval``: any row the ``code`` verifier can
test). Each policy turn is one attempt. A turn that ends with the stop marker (``stop``, default
a newline: the end of ``code_synthetic``'s one-line answer) is run against the task's tests in the
code sandbox (:mod:`rewards.code.sandbox`: the same jail, time, memory and output limits as the
code verifier). Every test passed ends the episode; otherwise the observation says which tests
failed and how (:mod:`reasoning_rl.envs.failure_report`: the trusted harness's per-test result,
never the test source), and the policy tries again, up to ``task.episode.max_turns`` attempts.
A turn that ends with EOS is the policy's last attempt as it stands (not run here).

For a continuation task (HumanEval format, the completion continues the prompt's stub) the
observation is a Python comment block and then the prompt again (``retry_prompt=full``; or its open
last line, ``last_line``), so a retry continues a stub as the first attempt did::

    def f(x):
        \"\"\"Return x plus 3.\"\"\"
        return x + 4                                         <- attempt 1 (sampled), ends at "\\n"
    # 0 of 9 tests passed                                    <- observation (never trained on)
    # test 1: f(-7) returned -3, expected -4
    def f(x):
        \"\"\"Return x plus 3.\"\"\"
        return x + 3                                         <- attempt 2 (sampled)

For any other format (MBPP: the program is the completion's last ```python block) the
observation is the comment lines alone, then ``instruction`` when set. With a chat model
(``task.episode.observation_role=user``) the observation is a user message (:mod:`reasoning_rl.envs.chat`)
and ending the assistant turn (EOS, ``<|im_end|>``) submits the attempt as the stop marker does
(:attr:`CodeFeedback.answers_turn_end`). The reward is the task's own verifier on the final
attempt alone (:meth:`CodeFeedback.scored_text` is ``Completion.text``; the whole episode is in
``EpisodeCompletion.turns``); with ``attempt_discount`` d < 1 it is multiplied by
``d ** (attempts - 1)`` (:meth:`CodeFeedback.reward_scale`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from reasoning_rl.envs.base import Environment, StepResult, Turn
from reasoning_rl.envs.failure_report import TestReport, read_report, reporting_suite
from reasoning_rl.envs.registry import register_environment

log = logging.getLogger(__name__)


def feedback_lines(report: TestReport, timeout: float, max_failures: int) -> str:
    """The observation's comment lines for a failed attempt (each ``# ...`` and a newline)."""
    if report.status == "timeout":
        lines = [f"the program ran past {timeout:g} s and was killed"]
    elif report.status == "unscorable":
        lines = [report.detail or "no code to run"]
    else:
        lines = [f"{report.passed} of {report.total} tests passed"]
        lines += list(report.failures[:max_failures]) if report.failures else [report.detail] if report.detail else []
    return "".join("# " + line.replace("\n", " ")[:160] + "\n" for line in lines)


RETRY_PROMPTS: dict[str, Callable[[str], str]] = {
    "full": lambda prompt: prompt,                           # the whole stub again (HumanEval)
    "last_line": lambda prompt: prompt.rsplit("\n", 1)[-1],  # its open last line: code_synthetic's "    return "
    "none": lambda prompt: "",
}
"""What of a continuation task's prompt follows the feedback, so the retry continues a stub (``retry_prompt``)."""


def continues_prompt(fields: dict[str, Any], attempt: str) -> bool:
    """Whether the program is the prompt continued by the attempt (HumanEval format, a body): the
    retry then needs the prompt again."""
    from rewards.code.formats import defines_function

    return bool(fields.get("test") and fields.get("entry_point") and fields.get("prompt")
                and not defines_function(attempt, str(fields["entry_point"])) and "```" not in attempt)


@register_environment("code_feedback")
class CodeFeedback(Environment):
    """Runs each attempt against the task's tests; the observation reports the failed tests."""

    answers_turn_end = True
    """With chat observations a turn ended by the end-of-turn token is an attempt too (it is run)."""

    def __init__(self, stop: str = "\n", max_failures: int = 1, attempt_discount: float = 1.0,
                 retry_prompt: str = "full", timeout: float = 5.0, memory_mb: int = 1024, extract: str = "auto",
                 isolation: str | None = None, instruction: str = "") -> None:
        """``stop``: the marker that ends an attempt and hands it to the tests (default a newline:
        one-line answers; ```` "```\\n" ```` for fenced blocks); ``max_failures``: failed tests
        reported per attempt; ``attempt_discount``: the reward is multiplied by
        ``attempt_discount ** (attempts - 1)`` (1 = the final attempt counts fully); ``retry_prompt``:
        what of a continuation task's prompt follows the feedback (:data:`RETRY_PROMPTS`); ``timeout``,
        ``memory_mb``, ``isolation``: the sandbox limits, the code verifier's defaults (5 CPU
        seconds, 1 GiB, the strongest isolation); ``extract``: how the program is taken from an
        attempt, as the code verifier's option (``auto``, ``raw``, ``last_block``); ``instruction``: text put
        after the failed tests' lines (a chat task: what to do next, "Write the corrected function in one
        ```python block."; a newline is added when it lacks one), "" = none."""
        from rewards.code.extract import EXTRACT_MODES

        if not stop:
            raise ValueError("code_feedback needs a non-empty stop marker (task.episode.options.stop)")
        if max_failures < 1:
            raise ValueError(f"code_feedback max_failures must be >= 1, got {max_failures}")
        if not 0.0 < attempt_discount <= 1.0:
            raise ValueError(f"code_feedback attempt_discount must be in (0, 1], got {attempt_discount}")
        if timeout <= 0:
            raise ValueError(f"code_feedback timeout must be > 0 seconds, got {timeout}")
        if retry_prompt not in RETRY_PROMPTS:
            raise ValueError(f"code_feedback retry_prompt must be one of {tuple(RETRY_PROMPTS)}, got {retry_prompt!r}")
        if extract not in EXTRACT_MODES:
            raise ValueError(f"code_feedback extract must be one of {EXTRACT_MODES}, got {extract!r}")
        self.stop = (stop,)
        self.max_failures, self.attempt_discount = int(max_failures), float(attempt_discount)
        self.retry_prompt = retry_prompt
        self.instruction = instruction if not instruction or instruction.endswith("\n") else instruction + "\n"
        self.timeout, self.memory_mb, self.extract, self.isolation = float(timeout), int(memory_mb), extract, isolation
        self.fields: dict[str, Any] = {}
        self.reference: Any = None
        self.reports: list[TestReport] = []
        """One report per attempt run here, in order."""

    def reset(self, example: Any) -> str:
        self.fields, self.reference = dict(example.fields), example.reference
        return example.prompt

    def step(self, model_text: str) -> StepResult:
        report = self.run(model_text)
        self.reports.append(report)
        if report.status == "passed":
            return StepResult(done=True, reward=1.0, tool="ok")
        if report.status == "unscorable" and report.detail.startswith("the tests could not run"):
            log.warning("code_feedback: %s; the episode ends without feedback", report.detail)
            return StepResult(done=True, tool="error")
        return StepResult(observation=feedback_lines(report, self.timeout, self.max_failures) + self.instruction
                          + self._retry(model_text),
                          reward=report.passed / report.total if report.total else 0.0,
                          tool="timeout" if report.status == "timeout" else "error")

    def run(self, attempt: str) -> TestReport:
        """Run one attempt against the tests (rewritten to report each failure) in the sandbox."""
        from rewards.code import CodeVerifier, Limits, run_tests

        prepared = CodeVerifier(extract=self.extract).prepare(attempt, self.reference, self.fields)
        if not isinstance(prepared, tuple):  # no code in the attempt, or the row's tests cannot be built
            reason = str(prepared.info.get("reason", ""))
            return TestReport("unscorable", 0, 0, detail=reason if reason.startswith("no code")
                              else f"the tests could not run: {reason}")
        program, tests = prepared
        result = run_tests(program, self.timeout, tests=reporting_suite(tests),
                           limits=Limits(memory_mb=self.memory_mb), isolation=self.isolation)
        if result.harness_error:
            return TestReport("unscorable", 0, result.total, detail=f"the tests could not run: {result.harness_error}")
        return read_report(result.status, result.passed, result.total, result.detail, result.cases)

    def _retry(self, attempt: str) -> str:
        """What follows the feedback after ``attempt``: the retry prompt (:data:`RETRY_PROMPTS`) when the
        task's completion continues its prompt, else nothing."""
        if not continues_prompt(self.fields, attempt):
            return ""
        return RETRY_PROMPTS[self.retry_prompt](str(self.fields.get("prompt", "")))

    def observation_spans(self, text: str) -> list[tuple[int, int]]:
        """What :meth:`step` would have appended after each attempt of ``text`` (after :meth:`reset`): after
        a stop marker, the run of feedback lines (each starting ``# ``), then ``instruction`` and the retry
        prompt where they follow. A policy's own comment line right after a stop marker reads as feedback."""
        stop, spans, attempt_start = self.stop[0], [], 0
        pos = text.find(stop)
        while pos != -1:
            start = end = pos + len(stop)
            while text.startswith("# ", end):  # feedback_lines: one "# ..." line each
                newline = text.find("\n", end)
                end = len(text) if newline == -1 else newline + 1
            if end > start:
                if self.instruction and text.startswith(self.instruction, end):
                    end += len(self.instruction)
                retry = self._retry(text[attempt_start:pos])
                if retry and text.startswith(retry, end):
                    end += len(retry)
                spans.append((start, end))
                attempt_start = end
            pos = text.find(stop, end)
        return spans

    def scored_text(self, turns: Sequence[Turn]) -> str:
        """The final attempt: the last policy turn (a turn cut by the budget stays cut, and fails)."""
        return next((t.text for t in reversed(turns) if t.role == "sampled"), "")

    def reward_scale(self, turns: int) -> float:
        """``attempt_discount ** (attempts - 1)``: every policy turn is an attempt."""
        return self.attempt_discount ** max(0, turns - 1)
