"""The retry of ``code_feedback`` measured on fixed failures: each checkpoint retries the same failed attempts.

    python -m benchmarks.retry_probe --episodes <eval folder>/<model>/<benchmark>/problems.jsonl \\
        --task code_synthetic_feedback --option retry_prompt=last_line <checkpoint> [<checkpoint> ...]

Held-out "accuracy after the second attempt" mixes two skills: how many first attempts fail (which
problems reach a retry) and how well a retry fixes them. This probe holds the first one fixed. It
reads the episodes of one ``reasoning-rl-eval ... env=code_feedback`` run (``problems.jsonl``: one
greedy episode per problem); for every problem whose first attempt failed, the context is the task's
prompt, that attempt and the feedback ``code_feedback`` gives it (rebuilt by the environment, its
tests run in the sandbox, and checked against the recorded episode); each checkpoint samples one
retry from that context (greedy; the prompt as text, tokenized whole: with a tokenizer whose
decode/re-encode is the identity, such as the tiny model's characters, these are the episode's ids)
and the environment runs it. Printed per checkpoint: failures fixed by the retry, and retries that
repeat the failed attempt; ``--json`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Failure:
    """A failed first attempt and the context a retry continues."""

    example: Any
    attempt: str
    context: str
    env: Any
    """The environment after the first attempt (forked for each checkpoint's retry)."""


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` of ``--option``; the value read as JSON when it parses (numbers), else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--option {text!r}: write key=value (e.g. retry_prompt=last_line)")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def failures(episodes: Path, task: str, options: dict[str, Any], limit: int | None = None) -> list[Failure]:
    """The recorded episodes' failed first attempts, each with its context rebuilt by the environment."""
    from reasoning_rl.envs import get_environment
    from reasoning_rl.settings.task import TaskConfig
    from reasoning_rl.tasks import Task

    t = Task(TaskConfig(name=task, max_eval_examples=None))
    by_id = {e.id: e for e in t.examples(t.eval_split)}
    out: list[Failure] = []
    for line in episodes.read_text(encoding="utf-8").splitlines()[:limit]:
        row = json.loads(line)
        episode = row["episodes"][0]
        if episode["turns"] < 2:
            continue  # the first attempt passed, or ended the episode
        example = by_id.get(row["task_id"])
        if example is None:
            raise SystemExit(f"{episodes}: task_id {row['task_id']!r} is not in {task}'s held-out split")
        env = get_environment("code_feedback", **options)
        env.reset(example)
        stop = env.stop[0]
        attempt = episode["text"][:episode["text"].index(stop) + len(stop)]
        observation = env.step(attempt).observation
        if not episode["text"].startswith(attempt + observation):
            raise SystemExit(f"{row['task_id']}: the rebuilt feedback differs from the recorded episode's; "
                             "pass the options the evaluation ran with (--option retry_prompt=...)")
        out.append(Failure(example, attempt, example.prompt + attempt + observation, env))
    return out


def retry(checkpoint: str, cases: Sequence[Failure], max_new_tokens: int, batch_size: int) -> dict[str, Any]:
    """One greedy retry per failure from ``checkpoint``, run by a fork of the failure's environment."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reasoning_rl.policy.engines import HFEngine
    from reasoning_rl.rollouts.sampling import SamplingConfig

    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    engine = HFEngine(model, tokenizer, batch_size=batch_size)
    stop = cases[0].env.stop[0] if cases else "\n"
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, do_sample=False, stop=[stop])
    groups = engine.generate([c.context for c in cases], 1, sampling, seed=0)
    fixed = repeated = 0
    for case, [completion] in zip(cases, groups):
        result = case.env.fork().step(completion.text)
        fixed += result.done and result.reward == 1.0
        repeated += completion.text.strip() == case.attempt.strip()
    return {"checkpoint": checkpoint, "failures": len(cases), "fixed": fixed, "repeated": repeated}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.retry_probe", description=__doc__.split("\n\n")[1])
    p.add_argument("checkpoints", nargs="+", help="model folders (save_pretrained), each retries every failure")
    p.add_argument("--episodes", type=Path, required=True, help="problems.jsonl of a reasoning-rl-eval env=code_feedback run")
    p.add_argument("--task", default="code_synthetic_feedback", help="the task whose held-out split was evaluated")
    p.add_argument("--option", action="append", default=[], help="code_feedback option as in the evaluation, key=value")
    p.add_argument("--max-new-tokens", type=int, default=12, help="tokens of a retry (the evaluation's max_new_tokens)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--limit", type=int, default=None, help="the first N problems of the file only")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args(argv)
    if not args.episodes.is_file():
        print(f"retry_probe: --episodes {args.episodes}: no such file (problems.jsonl of reasoning-rl-eval env=code_feedback)")
        return 2
    cases = failures(args.episodes, args.task, dict(parse_option(o) for o in args.option), args.limit)
    print(f"{len(cases)} failed first attempts in {args.episodes}")
    results = []
    for checkpoint in args.checkpoints:
        r = retry(checkpoint, cases, args.max_new_tokens, args.batch_size)
        share = r["fixed"] / r["failures"] if r["failures"] else 0.0
        print(f"{checkpoint}: {r['fixed']} of {r['failures']} fixed ({100 * share:.1f}%), "
              f"{r['repeated']} repeated the failed attempt", flush=True)
        results.append(r)
    if args.json is not None:
        args.json.write_text(json.dumps({"episodes": str(args.episodes), "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
