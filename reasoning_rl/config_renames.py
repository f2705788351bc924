"""The one table of renamed settings: the flat ``algo.*`` keys that became keys of a group.

GRPO's and PPO's settings were one flat block whose groups showed only as name prefixes
(``correction_*``, ``kl_*``, ...); they are now typed groups (``reasoning_rl.algo.grpo_config``).
An old key is refused in one line that names its new one (:func:`renamed_key_message`, called
where an unknown key is reported), and a run folder written before the rename is recognised by
its ``config.yaml`` (:func:`renamed_keys_in`). A key is only refused where the chosen algorithm's
schema does not have it: ``algo.beta`` is still DPO's own beta.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RENAMED: dict[str, str] = {
    # algo.advantage: the estimator and its options
    "algo.advantage": "algo.advantage.estimator",
    "algo.std": "algo.advantage.std",
    "algo.adv_eps": "algo.advantage.eps",
    "algo.pass_k": "algo.advantage.pass_k",
    "algo.positive_weight": "algo.advantage.positive_weight",
    # algo.policy_loss: the objective, its clip range and options
    "algo.policy_loss": "algo.policy_loss.name",
    "algo.eps_low": "algo.policy_loss.eps_low",
    "algo.eps_high": "algo.policy_loss.eps_high",
    "algo.dual_clip_c": "algo.policy_loss.dual_clip_c",
    "algo.log_ratio_clamp": "algo.policy_loss.log_ratio_clamp",
    "algo.ratio_level": "algo.policy_loss.ratio_level",
    # algo.kl: the KL(pi_theta || pi_ref) term
    "algo.beta": "algo.kl.beta",
    "algo.kl_estimator": "algo.kl.estimator",
    "algo.kl_placement": "algo.kl.placement",
    "algo.kl_clamp": "algo.kl.clamp",
    "algo.ref_reset_every": "algo.kl.ref_reset_every",
    # algo.entropy_control: which tokens keep the policy gradient
    "algo.entropy_control": "algo.entropy_control.name",
    "algo.cov_fraction": "algo.entropy_control.fraction",
    "algo.clip_cov_low": "algo.entropy_control.cov_low",
    "algo.clip_cov_high": "algo.entropy_control.cov_high",
    "algo.kl_cov_coef": "algo.entropy_control.kl_coef",
    "algo.entropy_top_fraction": "algo.entropy_control.top_fraction",
    # algo.correction: the off-policy correction
    "algo.correction": "algo.correction.name",
    "algo.correction_c": "algo.correction.c",
    "algo.correction_low": "algo.correction.low",
    "algo.correction_high": "algo.correction.high",
    "algo.correction_delta": "algo.correction.delta",
    "algo.correction_kl_max": "algo.correction.kl_max",
    # algo.dynamic_sampling: DAPO's dynamic sampling
    "algo.dynamic_sampling": "algo.dynamic_sampling.enabled",
    "algo.dynamic_sampling_max_rounds": "algo.dynamic_sampling.max_rounds",
}
"""Old dotted key -> new dotted key (docs/algorithms.md, "Settings groups", lists it)."""


def renamed_key_message(key: str) -> str | None:
    """``algo.beta was renamed: use algo.kl.beta`` for an old key (``+`` or ``~`` prefixes ignored);
    None for any other key."""
    new = RENAMED.get(key.lstrip("+~"))
    if new is None:
        return None
    return (f"{key.lstrip('+~')} was renamed: use {new} (the algo settings are grouped; "
            f"docs/algorithms.md lists every old and new key)")


def renamed_keys_in(values: Mapping[str, Any], known: set[str]) -> list[str]:
    """The old keys a composed or saved config (a plain dict with an ``algo`` mapping) sets: keys the chosen
    algorithm's schema (``known``: its field names) lacks, and old keys that are now a group's name
    (``algo.correction``) holding a plain value instead of the group."""
    algo = values.get("algo")
    if not isinstance(algo, Mapping):
        return []
    out = []
    for key, value in algo.items():
        dotted = f"algo.{key}"
        if dotted not in RENAMED:
            continue
        if key not in known or (RENAMED[dotted].startswith(dotted + ".") and not isinstance(value, Mapping)):
            out.append(dotted)
    return out



def upgrade_saved_config(values: Mapping[str, Any], algo: Any) -> dict[str, Any]:
    """A config saved before the rename (a run folder's ``config.yaml``) with its old keys moved to their new
    places, for the chosen algorithm's settings ``algo`` (a dataclass instance): a run started before the
    rename compares equal to the same command now, so it resumes."""
    out = dict(values)
    old = renamed_keys_in(values, {f.name for f in dataclasses.fields(algo)})
    if not old:
        return out
    moved = {RENAMED[dotted]: values["algo"][dotted[len("algo."):]] for dotted in old}
    saved = {k: v for k, v in values["algo"].items() if f"algo.{k}" not in old}
    for new, value in moved.items():
        _, group, name = new.split(".")
        saved[group] = {**saved.get(group, {}), name: value}
    out["algo"] = saved
    return out

_OLD_KEY = re.compile(r"(?<![\w.])algo\.(" + "|".join(sorted((k[5:] for k in RENAMED), key=len, reverse=True))
                      + r")\b(?!\.?\w)")  # not a longer name (algo.beta_x), not a new key (algo.kl.beta)


def rewrite_text(text: str) -> str:
    """``text`` with every old dotted key (``algo.beta=0``, ``algo.correction: tis``) written as its new one:
    how README.md, docs pages and commands are brought to the new keys. (A key DPO still has, ``algo.beta``
    in a DPO command, is rewritten too: read the diff.)"""
    return _OLD_KEY.sub(lambda m: RENAMED["algo." + m.group(1)], text)


def main(argv: list[str] | None = None) -> int:
    """``python -m reasoning_rl.config_renames FILE...``: rewrite the old flat keys in those files in place."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m reasoning_rl.config_renames",
                                     description="Rewrite the old flat algo keys of YAML, Markdown or shell files "
                                                 "to the grouped ones, in place.")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.files if not p.is_file()]
    if missing:
        print(f"error: no such file: {', '.join(missing)}; name the YAML, Markdown or shell files to rewrite",
              file=sys.stderr)
        return 2
    for path in args.files:
        old = path.read_text()
        if (new := rewrite_text(old)) != old:
            path.write_text(new)
            print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
