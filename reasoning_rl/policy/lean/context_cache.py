"""Keys and values carried from one ``generate_from_ids`` call to the next: a multi-turn episode's
context is prefilled once, and each later turn prefills only what was appended to it.

Without it, turn k of an episode prefills its whole context (prompt, turns 1 .. k-1, observations),
so an episode of K turns prefills about K/2 times its length. With it (``task.episode.cache``,
reasoning_rl.envs.episode), the native engine on the lean runtime keeps, for each running episode
row r, the keys and values of the tokens it has already run, and the next call runs only the rest:
the last sampled token (sampled, never fed back) and the observation.

Layout. Between calls, row r is stored compact, with no padding::

    ids_r                                       the n_r context tokens whose keys/values are kept
    kv_r   [layers, 2 (k, v), H_kv, n_r, d]     position j holds token ids_r[j], at RoPE position j

A call continues a batch of b rows; row r's new input is ``new_r = context_r[n_r:]`` (m_r >= 1
tokens; the whole context when it has no usable entry). Per layer, the decoder works on::

    [ pad | kv_r (n_r) ][ pad | new_r (m_r) ][ t_0 ... t_{T-1} ]      one row
    <---- N = max n_r ----><---- M = max m_r ----><------ T ------->

    positions:  new_r at n_r + 0 .. n_r + m_r - 1, new token t at n_r + m_r + t
    mask:       the pads (left padding of each block, a hole between the two) are hidden

Positions count the row's real tokens, as the recompute path's ``cumsum(mask) - 1`` does, and
every query sees exactly the tokens before it, so both paths compute the same logits up to float
rounding (``tests/reasoning_rl/envs/test_episode_cache.py``: same tokens, log-probs within 1e-4; 1.4e-5 is the largest difference seen).
After the call, row r's entry becomes its context plus its kept new tokens but the last:
``ids_r = context_r + turn_r[:-1]`` (the kept tokens, after EOS and stop-string cuts, are a
prefix of those run).

An entry is used only when its ids are a proper prefix of the row's new context and the policy
version has not changed since it was made; anything else is recomputed, so a wrong entry can cost
time but never change a token. Entries of rows not in a call (finished episodes) are dropped.

Memory: the entries hold ``sum_r n_r <= rows x (prompt + task.episode.max_tokens)`` tokens of
``layers x 2 x H_kv x d`` values each (Qwen2.5-0.5B in bf16: 12 KiB a token); a call briefly holds
the next entries beside the old ones, plus its batch's ``b x (N + M + T)`` working copy.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


@dataclass
class CachedContext:
    """One row's carried keys and values."""

    ids: list[int]
    """The context tokens whose keys and values ``kv`` holds, in order."""
    kv: torch.Tensor
    """``[layers, 2, H_kv, len(ids), d]``: keys (index 0) and values (1) of every layer."""
    policy_version: int
    """The engine's policy version when they were computed (other weights: not usable)."""


class ContextCache:
    """The carried keys and values of the rows of the last call, by the caller's row keys."""

    def __init__(self) -> None:
        self.rows: dict[Hashable, CachedContext] = {}
        self.reused_tokens = 0
        """Context tokens whose keys and values came from the cache, over every call."""
        self.prefilled_tokens = 0
        """Context tokens run through the model (prefill), over every call."""

    def usable(self, key: Hashable, context: Sequence[int], policy_version: int) -> CachedContext | None:
        """``key``'s entry when it continues ``context`` (its ids a proper prefix, same weights)."""
        entry = self.rows.get(key)
        if entry is None or entry.policy_version != policy_version or len(entry.ids) >= len(context):
            return None
        return entry if list(context[:len(entry.ids)]) == entry.ids else None

    def share(self, source: Hashable, target: Hashable) -> None:
        """Give ``target`` the entry of ``source`` (a row whose context became a copy of the source's:
        a retry group, reasoning_rl.envs.episode); entries are never changed in place, so both may hold it."""
        if source in self.rows:
            self.rows[target] = self.rows[source]

    def replace(self, rows: dict[Hashable, CachedContext]) -> None:
        """Keep ``rows`` and drop every other entry."""
        self.rows = rows

    @property
    def nbytes(self) -> int:
        """Memory the entries hold."""
        return sum(e.kv.numel() * e.kv.element_size() for e in self.rows.values())
