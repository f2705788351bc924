"""Shared test fixtures and helpers: where the benchmark data lies, GPU skipping, and the one rule every
float tolerance of the suite follows (:func:`rounding_atol`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _find_shared_data() -> Path | None:
    candidates = [os.environ.get("REASONING_RL_DATA"), REPO_ROOT.parent / "shared" / "data", REPO_ROOT / "shared" / "data"]
    for c in candidates:
        if c and Path(c, "math500.jsonl").exists():
            return Path(c)
    return None


SHARED_DATA = _find_shared_data()


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """`../shared/data` (or $REASONING_RL_DATA): MATH-500, GSM8K, HumanEval, MBPP, AIME24, math_equiv."""
    if SHARED_DATA is None:
        pytest.skip("benchmark data not found: set REASONING_RL_DATA to the folder holding math500.jsonl")
    return SHARED_DATA


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


# --- Float comparisons ------------------------------------------------------------------------------------


def cpu_capability() -> str:
    """The kernel set torch dispatches to on this CPU (``ATEN_CPU_CAPABILITY`` forces one): DEFAULT, AVX2, AVX512."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def pytest_report_header(config: pytest.Config) -> str:
    try:
        return f"torch CPU capability: {cpu_capability()} (ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'unset')})"
    except ImportError:
        return "torch CPU capability: torch not installed"


def rounding_atol(expected, terms: int, dtype=None, scale: float | None = None) -> float:
    """The largest difference rounding alone can make between two evaluations of ``expected``'s expression.

    The rule, stated once for the whole suite. Two evaluations of one floating-point expression that differ
    only in the order of their operations agree up to rounding: another CPU kernel set
    (``ATEN_CPU_CAPABILITY=default|avx2|avx512`` changes the vector width and with it the order of every
    reduction), a chunked, cached or sharded path, another thread count. A sum of n terms in any order is
    within (n - 1) * u * sum|x_i| of the exact sum (u = eps / 2; Higham, *Accuracy and Stability of Numerical
    Algorithms*, 2nd ed., eq. 4.4), so two orders differ by at most about n * eps * m for terms of magnitude m.
    Hence::

        atol = terms * eps(dtype) * scale,   scale = max |expected|,   rtol = 0

    ``terms`` counts the terms summed along the chain of reductions that produced the values (a matmul's
    inner width, the vocabulary of a softmax, the positions or rows a gradient sums over, once per layer);
    each call writes how it counts. ``dtype`` is the precision the values were computed in (default:
    ``expected``'s). ``scale`` is the magnitude of the compared tensor as a whole, not of each element: an
    element that is a small difference of large terms (a gradient entry, a centred advantage) carries the
    rounding of those terms, which an element-wise relative tolerance would wrongly demand it not have. When
    the whole compared value is such a difference (a KL between two nearly equal policies, a mean of near-zero
    gradients), the caller passes ``scale``, the magnitude of the terms, and says what it is.
    Nothing here is picked to pass on one CPU: a comparison that needs more than this has found a difference
    that is not rounding. Comparisons the code promises to be exact (a resumed run against an uninterrupted
    one on the same machine) stay exact and do not use this.
    """
    import torch

    expected = torch.as_tensor(expected)
    dtype = dtype or (expected.dtype if expected.is_floating_point() else torch.float32)
    if scale is None:
        scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    return terms * torch.finfo(dtype).eps * max(scale, torch.finfo(dtype).tiny)


def decoder_terms(config, positions: int, rows: int = 0) -> int:
    """Terms along a decoder's longest chain of sums, for :func:`rounding_atol`: in each layer the projections'
    widths (q, k, v and o over the hidden size, the MLP's down projection over the intermediate size) and
    attention's sum over the positions; then the LM head's width and the softmax over the vocabulary. A weight's
    gradient then sums over every position of every row: pass ``rows`` (the batch) for gradients, 0 for values."""
    h, i = config.hidden_size, config.intermediate_size
    return config.num_hidden_layers * (3 * h + i + positions) + h + config.vocab_size + rows * positions


def assert_close_up_to_rounding(actual, expected, *, terms: int, dtype=None, scale: float | None = None,
                                msg: str = "") -> None:
    """``torch.testing.assert_close`` with :func:`rounding_atol`'s tolerance; a failure names the CPU capability."""
    import torch

    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    atol = rounding_atol(expected, terms, dtype, scale)
    if os.environ.get("ROUNDING_LOG") and actual.shape == expected.shape:  # margins across CPU capabilities
        used = float((actual.detach().double() - expected.detach().double()).abs().max()) / atol if atol else 0.0
        with open(os.environ["ROUNDING_LOG"], "a") as f:
            f.write(f"{cpu_capability()}\t{os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]}\t{msg}\t{used:.3f}\n")
    torch.testing.assert_close(
        actual, expected, rtol=0.0, atol=atol,
        msg=lambda m: (f"{msg + ': ' if msg else ''}{m}\nallowed: {terms} terms x eps x scale = {atol:.3g} "
                       f"(CPU capability {cpu_capability()})"))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (torchrun's rendezvous, the Slurm daemons)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_script(name: str):
    """The module ``scripts/<name>.py`` (``scripts/`` is not a package), imported from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
