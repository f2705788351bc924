"""What a model's completions look like in an evaluation: the figures docs/real_model.md reports beside
accuracy, so a gain can be put down to format or to reasoning.

    python scripts/completion_stats.py eval_results/<model> --tokenizer <model folder> [--max-new-tokens 512]

For every ``<benchmark>/results.json`` under the folder (with its ``problems.jsonl`` cache beside it), one
row: samples, accuracy, the share with no extractable answer (the verifier found none), the share that
reached ``--max-new-tokens`` (truncated), and the mean and median completion length in tokens. Lengths are
the cached completion texts tokenized again (the cache keeps texts, not token ids), so a count can differ
from the generated one by a token where decoding and encoding do not round-trip. Reads the result
files only; generates and scores nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.io import read_jsonl


def rows(folder: Path, tokenizer, max_new_tokens: int) -> list[dict]:
    out = []
    for result_file in sorted(folder.glob("*/results.json")):
        result = json.loads(result_file.read_text())
        ids = {p["task_id"] for p in result["problems"]}
        completions = [c for rec in read_jsonl(result_file.parent / "problems.jsonl") if rec["task_id"] in ids
                       for c in rec["completions"]]
        lengths = [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in completions]
        answers = [a for p in result["problems"] for a in p["answers"]]
        correct = [c for p in result["problems"] for c in p["correct"]]
        out.append({"benchmark": result["benchmark"]["name"], "problems": len(result["problems"]),
                    "samples": len(answers), "accuracy": sum(correct) / len(correct),
                    "no_answer": sum(a is None for a in answers) / len(answers),
                    "truncated": sum(n >= max_new_tokens for n in lengths) / len(lengths),
                    "mean_tokens": statistics.fmean(lengths), "median_tokens": statistics.median(lengths)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an evaluation's <output_dir>/<model> folder")
    parser.add_argument("--tokenizer", required=True, help="the model folder whose tokenizer counts tokens")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(Path(args.tokenizer).expanduser()))
    print("| benchmark | problems | samples | accuracy | no extractable answer | truncated | tokens (mean / median) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows(args.folder, tokenizer, args.max_new_tokens):
        print(f"| {r['benchmark']} | {r['problems']} | {r['samples']} | {100 * r['accuracy']:.2f}% | "
              f"{100 * r['no_answer']:.1f}% | {100 * r['truncated']:.1f}% | {r['mean_tokens']:.0f} / {r['median_tokens']:.0f} |")


if __name__ == "__main__":
    main()
