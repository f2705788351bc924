"""Pack prompts and sampled completions into padded tensors for the policy's forward pass.

Layout of one micro-batch (P = longest prompt, L = longest completion)::

    input_ids       [B, P + L]   <pad>..<pad> prompt | completion <pad>..<pad>
    attention_mask  [B, P + L]   0 on padding, 1 elsewhere
    completion_mask [B, L]       1 on completion tokens (EOS included), 0 on a row's loss_mask zeros
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class PackedBatch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    completion_start: int

    def to(self, device: torch.device) -> PackedBatch:
        return PackedBatch(self.input_ids.to(device), self.attention_mask.to(device),
                           self.completion_mask.to(device), self.completion_start)


def pack(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_id: int) -> PackedBatch:
    """Left-pad prompts and right-pad completions to a common width."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    width_p = max(len(p) for p in prompt_ids)
    width_c = max(1, max(len(c) for c in completion_ids))
    b = len(prompt_ids)
    input_ids = torch.full((b, width_p + width_c), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width_p + width_c), dtype=torch.long)
    comp_mask = torch.zeros((b, width_c), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        input_ids[i, width_p - len(p):width_p] = torch.tensor(p, dtype=torch.long)
        attention[i, width_p - len(p):width_p] = 1
        if c:
            input_ids[i, width_p:width_p + len(c)] = torch.tensor(c, dtype=torch.long)
            attention[i, width_p:width_p + len(c)] = 1
            # A multi-turn episode's row carries a loss mask (0 on observations: reasoning_rl.algo.batch.MaskedTokens).
            mask = getattr(c, "loss_mask", None)
            comp_mask[i, :len(c)] = 1.0 if mask is None else torch.tensor(mask, dtype=torch.float32)
    return PackedBatch(input_ids, attention, comp_mask, width_p)
