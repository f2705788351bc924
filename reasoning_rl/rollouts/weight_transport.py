"""The policy's weights as one flat tensor per dtype: how a version travels to the asynchronous
generator process (reasoning_rl.rollouts.async_engine) and how its older versions are kept for a
checkpoint, one copy of the parameters and no pickling of tensors one by one."""

from __future__ import annotations

from typing import Any

import torch

Layout = list[tuple[str, torch.dtype, tuple[int, ...], int]]
"""(name, dtype, shape, offset in that dtype's buffer) of each tensor of a state dict."""


def pack_state(state: dict[str, torch.Tensor]) -> tuple[dict[torch.dtype, torch.Tensor], Layout]:
    """A state dict as one flat tensor per dtype (a copy) and the layout that unpacks it. A tensor that is
    another's (tied embeddings: the same storage, offset and shape) is stored once."""
    layout: Layout = []
    parts: dict[torch.dtype, list[torch.Tensor]] = {}
    sizes: dict[torch.dtype, int] = {}
    seen: dict[tuple[int, torch.dtype, tuple[int, ...]], int] = {}
    for name, t in state.items():
        t = t.detach()
        key = (t.data_ptr(), t.dtype, tuple(t.shape))
        if key in seen and t.is_contiguous():
            layout.append((name, t.dtype, tuple(t.shape), seen[key]))
            continue
        seen[key] = sizes.get(t.dtype, 0)
        layout.append((name, t.dtype, tuple(t.shape), sizes.get(t.dtype, 0)))
        parts.setdefault(t.dtype, []).append(t.reshape(-1))
        sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel()
    return {dtype: torch.cat(ts) for dtype, ts in parts.items()}, layout


def unpack_state(buffers: dict[torch.dtype, torch.Tensor], layout: Layout) -> dict[str, torch.Tensor]:
    """The state dict of :func:`pack_state` (views into ``buffers``)."""
    out = {}
    for name, dtype, shape, offset in layout:
        n = 1
        for d in shape:
            n *= d
        out[name] = buffers[dtype][offset:offset + n].view(shape)
    return out


def load_weights_(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model``'s tensors in place."""
    with torch.no_grad():
        for name, target in model.state_dict().items():
            target.copy_(state[name])
