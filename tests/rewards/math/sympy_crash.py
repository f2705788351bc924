"""Make ``sympy.simplify`` raise, in whichever process calls these (the tests send them
to the SymPy worker with ``run_limited``). A module of its own so worker processes can
import the functions by name."""

from __future__ import annotations

from typing import Any


class SympyCrash(RuntimeError):
    """The forced failure: a type no code path catches on purpose."""


def crash(*args: Any, **kwargs: Any) -> Any:
    raise SympyCrash("simplify crashed (forced by the test)")


_original: dict[str, Any] = {}


def break_simplify() -> None:
    import sympy

    _original.setdefault("simplify", sympy.simplify)
    sympy.simplify = crash


def restore_simplify() -> None:
    import sympy

    sympy.simplify = _original.pop("simplify", sympy.simplify)
