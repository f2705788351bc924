"""Per-token log-probabilities of sampled tokens, without a full log-softmax copy.

    log pi(y_t | x, y_<t) = z_{t, y_t} / T - logsumexp_v(z_{t, v} / T)

gathering the chosen logit and subtracting the row's logsumexp needs one
``[B, L]`` result instead of a second ``[B, L, V]`` tensor (what
``log_softmax(...).gather(...)`` would allocate). For large vocabularies the
rows are processed in chunks to bound the peak further.
"""

from __future__ import annotations

from typing import Any

import torch


def selective_log_softmax(logits: torch.Tensor, tokens: torch.Tensor, chunk_rows: int = 4) -> torch.Tensor:
    """log_softmax(logits)[..., tokens] for ``logits [B, L, V]``, ``tokens [B, L]``.  # [B, L]"""
    out = []
    for start in range(0, logits.shape[0], chunk_rows):
        rows = logits[start:start + chunk_rows]  # [b, L, V]
        chosen = rows.gather(-1, tokens[start:start + chunk_rows].unsqueeze(-1)).squeeze(-1)  # [b, L]
        out.append(chosen - torch.logsumexp(rows, dim=-1))
    return torch.cat(out, dim=0)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-token entropy H = logsumexp(z) - sum_v softmax(z)_v z_v.  # [B, L]"""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)


def completion_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_start: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the completion tokens ``input_ids[:, completion_start:]``.

    ``input_ids`` is ``[B, P + L]``: left-padded prompts of width P, then right-padded
    completions of width L. Logits at position t predict token t + 1, so the
    completion's logits are positions ``P-1 .. P+L-2``. Returns ``[B, L]`` log-probs
    (and entropies when asked), at the sampling temperature.
    """
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits  # [B, P+L, V]
    logits = logits[:, completion_start - 1:-1, :]  # [B, L, V]
    if temperature != 1.0:
        logits = logits / temperature
    tokens = input_ids[:, completion_start:]  # [B, L]
    logp = selective_log_softmax(logits, tokens)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach())
    return logp, entropy
