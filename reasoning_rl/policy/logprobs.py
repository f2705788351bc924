"""Per-token log-probabilities of sampled tokens, without a full log-softmax copy.

    log pi(y_t | x, y_<t) = z_{t, y_t} / T - logsumexp_v(z_{t, v} / T)

It is computed from the last hidden states of the real completion positions with the LM head
applied a chunk of positions at a time and recomputed in the backward
(``reasoning_rl.policy.lm_head``): no ``[B, L, V]`` tensor. The hidden states come from the lean
forward on the lean runtime (``model.runtime``, reasoning_rl.policy.runtime), and from
transformers' decoder on the hf runtime (reasoning_rl.policy.hf_forward) for the model classes
whose logits are ``lm_head(hidden)``. With chunking off (``model.lm_head_chunk: 0``, or ``auto``
for a small vocabulary), or for another model class, the full logits are computed and gathering
the chosen logit and subtracting the row's logsumexp needs one ``[B, L]`` result instead of a
second ``[B, L, V]`` tensor (what ``log_softmax(...).gather(...)`` would allocate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from reasoning_rl.batching import pack
from reasoning_rl.policy import hf_forward
from reasoning_rl.policy.lean import completion_hidden
from reasoning_rl.policy.lm_head import chunk_of, sampling_support, token_logprobs
from reasoning_rl.policy.runtime import uses_lean


def selective_log_softmax(logits: torch.Tensor, tokens: torch.Tensor, chunk_rows: int | None = None,
                          chunk_elements: int = 1 << 24) -> torch.Tensor:
    """log_softmax(logits)[..., tokens] for ``logits [B, L, V]``, ``tokens [B, L]``.  # [B, L]

    Rows go through ``logsumexp`` ``chunk_rows`` at a time (default: as many as fit in
    ``chunk_elements`` logits, at least one), which bounds its ``[b, L, V]`` temporary for a
    large vocabulary; a small one is done in one call."""
    if chunk_rows is None:
        chunk_rows = max(1, chunk_elements // max(1, logits.shape[1] * logits.shape[2]))
    parts = [rows.gather(-1, chosen.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(rows, dim=-1)  # [b, L]
             for rows, chosen in zip(logits.split(chunk_rows), tokens.split(chunk_rows))]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-token entropy H = logsumexp(z) - sum_v softmax(z)_v z_v.  # [B, L]
    Tokens outside a top-k / top-p set (logit -inf, probability 0) add nothing."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.where(probs > 0, probs * logits, 0.0).sum(-1)


def completion_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_start: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    group_size: int = 1,
    top_k: int = 0,
    top_p: float = 1.0,
    lm_head_chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the completion tokens ``input_ids[:, completion_start:]``.

    ``input_ids`` is ``[B, P + L]``: left-padded prompts of width P, then right-padded
    completions of width L. Logits at position t predict token t + 1, so the
    completion's logits are positions ``P-1 .. P+L-2``. Returns ``[B, L]`` log-probs
    (and entropies when asked), at the sampling temperature, 0 at padded positions.
    With ``top_k`` / ``top_p`` set, the distribution is renormalised over the tokens the
    sampler could draw (:func:`sampling_support`): the log-probs are those of the
    distribution the completions were actually sampled from, so the ratio and KL refer to it.

    ``group_size=G > 1`` says rows ``i*G .. i*G+G-1`` share one prompt (a GRPO group):
    each prompt then goes through the model once instead of G times (same numbers,
    gradients included; see :func:`reasoning_rl.policy.hf_forward.shared_prompt_forward`). A model
    on the lean runtime (``model.runtime``, :func:`reasoning_rl.policy.runtime.uses_lean`) runs
    :func:`reasoning_rl.policy.lean.completion_hidden`, the same computation with the prompt shared
    the same way, read from the model's parameters in fewer ops; on the hf runtime, a model class
    whose logits are ``lm_head(hidden)`` runs transformers' decoder
    (:func:`reasoning_rl.policy.hf_forward.completion_hidden`). Either way the LM head then runs
    ``lm_head_chunk`` positions at a time (``reasoning_rl.policy.lm_head``; None: the model's
    ``model.lm_head_chunk`` setting, 0: full logits). The log-probs are float32 whatever the
    model's dtype.

    With gradient checkpointing on (``model.gradient_checkpointing``, in training mode, with
    autograd on), the lean forward checkpoints every decoder layer; other models run full rows
    through their own (checkpointed) modules, as transformers keeps no cache to share then.
    """
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    tokens = input_ids[:, completion_start:]  # [B, L]
    # Padded completion positions get exactly 0, not log pi(<pad>): a raw pad log-prob can be
    # very negative, and a KL term exp(ref - logp) of it overflows to inf (inf * 0 = NaN).
    real = attention_mask[:, completion_start:].bool()  # [B, L]
    checkpoint = model.training and torch.is_grad_enabled() and checkpointing_enabled(model)  # a backward follows
    chunk = chunk_of(model) if lm_head_chunk is None else lm_head_chunk
    lean = uses_lean(model)  # model.runtime, decided once (reasoning_rl.policy.runtime): the same forward in fewer ops
    if lean or (group_size > 1 and not checkpoint):
        _check_groups(input_ids, completion_start, group_size)
    if lean:
        hidden = completion_hidden(model, input_ids, attention_mask, position_ids, completion_start, group_size,
                                   checkpoint)  # [B, L, D]
        head = model.lm_head
    elif chunk and hf_forward.chunked_head_refusal(model) is None:
        # Under gradient checkpointing transformers turns the key/value cache off: full rows then.
        hidden = hf_forward.completion_hidden(model, input_ids, attention_mask, position_ids, completion_start,
                                              group_size, share_prompt=not checkpoint)  # [B, L, D]
        head = hf_forward.lm_head_of(model)
    else:
        hidden = head = None
    if hidden is not None and chunk:  # the LM head on the real positions only, a chunk at a time (lm_head)
        logp_real, entropy_real = token_logprobs(hidden[real], head.weight, head.bias, tokens[real], temperature,
                                                 chunk=chunk, with_entropy=with_entropy, top_k=top_k,
                                                 top_p=top_p)  # [N] each
        logp = torch.zeros(real.shape, dtype=logp_real.dtype, device=real.device).masked_scatter(real, logp_real)
        entropy = None if entropy_real is None else torch.zeros_like(logp).masked_scatter(real, entropy_real)
        return logp, entropy
    if hidden is not None:  # lean, chunking off
        logits = torch.nn.functional.linear(hidden, head.weight, head.bias)  # [B, L, V]
    elif group_size > 1 and not checkpoint:
        logits = hf_forward.shared_prompt_forward(model, "logits", input_ids, attention_mask, position_ids,
                                                  completion_start, group_size)  # [B, L, V]
    else:
        # The module forward of full rows; also with group_size > 1 under gradient checkpointing,
        # where transformers turns the key/value cache off, so the prompt cannot be shared.
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                       use_cache=False).logits  # [B, P+L, V]
        logits = logits[:, completion_start - 1:-1, :]  # [B, L, V]
    logits = logits.float()  # fp32 LM head: logsumexp in float32 under bf16/fp16 autocast (no copy when float32)
    if temperature != 1.0:
        logits = logits / temperature
    if top_k or top_p < 1.0:
        logits = logits.masked_fill(~sampling_support(logits.detach(), top_k, top_p), float("-inf"))
    logp = torch.where(real, selective_log_softmax(logits, tokens), 0.0)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = torch.where(real, entropy_from_logits(logits.detach()), 0.0)
    return logp, entropy


def checkpointing_enabled(model: Any) -> bool:
    """Whether gradient checkpointing is on for ``model`` (transformers' ``is_activation_checkpointing``,
    ``is_gradient_checkpointing`` before 5.x; False for other modules). A peft (LoRA) policy: its base's."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if isinstance(getattr(type(model), name, None), property):
            return bool(getattr(model, name))
    return False


def _check_groups(input_ids: torch.Tensor, completion_start: int, group_size: int) -> None:
    """Rows ``i*G .. i*G+G-1`` must hold one prompt ``input_ids[:, :completion_start]``."""
    n, p = input_ids.shape[0], completion_start
    if n % group_size:
        raise ValueError(f"{n} rows do not split into groups of {group_size}")
    if group_size > 1:
        same = (input_ids[:, :p].view(-1, group_size, p) == input_ids[::group_size, :p].unsqueeze(1)).all()
        if not bool(same):
            raise ValueError("group_size > 1 needs rows i*G .. i*G+G-1 to share one prompt; they differ")


@torch.no_grad()
def frozen_logprobs(model: Any, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                    pad_token_id: int, temperature: float, micro_batch: int, group_size: int = 1,
                    top_k: int = 0, top_p: float = 1.0) -> list[torch.Tensor]:
    """Per-token log-probs of each completion under a model that is not being trained
    (pi_old, pi_ref), one 1-D float32 CPU tensor per completion, ``micro_batch`` rows at a time."""
    out: list[torch.Tensor] = []
    device = next(model.parameters()).device
    for s in range(0, len(prompts), micro_batch):
        packed = pack(prompts[s:s + micro_batch], completions[s:s + micro_batch], pad_token_id).to(device)
        logp, _ = completion_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_start,
                                      temperature, group_size=group_size, top_k=top_k, top_p=top_p)
        for row, c in zip(logp, completions[s:s + micro_batch]):
            out.append(row[: len(c)].float().cpu())
    return out


def pad_rows(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """Stack 1-D per-completion tensors into ``[len(rows), width]``, zeros after each row's end."""
    out = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out
