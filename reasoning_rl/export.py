"""``reasoning-rl-export <checkpoint> <out>``: a training checkpoint as a plain Hugging Face model folder.

A LoRA checkpoint (``model.lora.r > 0``: peft's adapter and ``base_model.json``) is loaded onto
its base and merged with peft's ``merge_and_unload`` (``W <- W + (alpha / r) B A`` in every adapted
layer, the adapter layers removed); a full checkpoint is written again as it is. Either way
``<out>`` holds ``config.json``, the weights, the tokenizer and the checkpoint's ``prompting.json``,
loads with ``AutoModelForCausalLM.from_pretrained(<out>)`` and is what vLLM or any other tool
serves. ``<out>`` is written atomically (a temporary folder renamed into place) and must not exist.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from reasoning_rl.errors import UserError


class ExportError(UserError, ValueError):
    """``reasoning-rl-export`` cannot write its output (the folder exists, or the input is no checkpoint)."""


def export_checkpoint(checkpoint: str | Path, out: str | Path) -> Path:
    """Write ``checkpoint`` (verified first) as a plain model folder ``out``; returns ``out``."""
    from reasoning_rl.policy.loading import load_pretrained
    from reasoning_rl.policy.lora import is_lora
    from reasoning_rl.run_folder.atomic import atomic_directory_write
    from reasoning_rl.run_folder.checkpoint import PROMPTING_FILE, check_checkpoint

    checkpoint, out = Path(checkpoint), Path(out)
    if out.exists():
        raise ExportError(f"{str(out)!r} already exists; choose a new folder for the exported model")
    check_checkpoint(checkpoint)
    model, tokenizer = load_pretrained(str(checkpoint), device="cpu")
    if is_lora(model):
        model = model.merge_and_unload()  # peft: the adapter folded into the base weights, plain modules back

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if (checkpoint / PROMPTING_FILE).is_file():  # reasoning-rl-eval prompts it as in training
            shutil.copyfile(checkpoint / PROMPTING_FILE, tmp / PROMPTING_FILE)

    atomic_directory_write(out, write)
    return out


def main(argv: list[str] | None = None) -> int:
    from reasoning_rl.entry_points import DEBUG_FLAG, as_user_error, pop_debug_flag, report_user_error

    parser = argparse.ArgumentParser(prog="reasoning-rl-export", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a checkpoint-<step> folder of a run (LoRA adapter or full model)")
    parser.add_argument("out", help="the folder to write the plain model to (must not exist)")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="show the traceback of an input error (docs/errors.md)")
    args = parser.parse_args(pop_debug_flag(list(sys.argv[1:] if argv is None else argv)))
    try:
        written = export_checkpoint(args.checkpoint, args.out)
    except Exception as exc:
        error = as_user_error(exc, "<out>")
        if error is None:
            raise
        return report_user_error("reasoning-rl-export", error, exc)
    print(f"exported {args.checkpoint} -> {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
