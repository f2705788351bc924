"""Guards on the shape of the trust boundary (rewards/code/sandbox/), read from the source with ``ast``.

* ``inside/`` runs in the jail from a bare interpreter: it may import the standard library and
  itself only.
* Exactly one module executes the model's program: ``inside/candidate.py``. Every other place
  that executes code or starts a process is listed below, and none of them touches the program.
"""

import ast
import sys
from pathlib import Path

import pytest

import rewards.code.sandbox as sandbox_package
from rewards.code.sandbox.inside import zygote

PACKAGE = Path(sandbox_package.__file__).parent
INSIDE = PACKAGE / "inside"
MODEL_CODE_MODULE = "inside/candidate.py"

# Every call that executes code or starts a process, per module. Exact: a new site fails the test.
EXECUTION_SITES = {
    "inside/candidate.py": {"exec", "compile"},  # the program, in C
    "inside/harness.py": {"exec", "compile"},  # the trusted tests, in Z
    "host.py": {"subprocess.Popen"},  # the jail (bwrap / unshare / python -I) from the launcher thread
    "jail.py": {"subprocess.run"},  # the probe that a level works (`python -I -c pass`)
    "inside/namespaces.py": {"os.posix_spawnp"},  # `mount`, for the unshare level's private mounts
}
_CODE_CALLS = {"exec", "eval", "compile", "runpy.run_module", "runpy.run_path", "runpy.run_code"}
_LAUNCH_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn", "subprocess.")
_LAUNCH_CALLS = {"os.system", "os.popen"}


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _execution_calls(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is not None and (name in _CODE_CALLS or name in _LAUNCH_CALLS
                                     or name.startswith(_LAUNCH_PREFIXES)):
                found.add(name)
    return found


def _touches_program(tree: ast.AST) -> bool:
    """``x["program"]``, ``x.get("program")`` or a variable/argument named ``program``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "program":
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "program"):
            return True
        if isinstance(node, ast.Name) and node.id == "program":
            return True
        if isinstance(node, ast.arg) and node.arg == "program":
            return True
    return False


@pytest.mark.parametrize("path", _modules(INSIDE), ids=_name)
def test_inside_imports_only_the_standard_library(path: Path) -> None:
    depth = len(path.parent.relative_to(INSIDE).parts)  # packages below inside/ this module sits in
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                assert top in sys.stdlib_module_names, f"{_name(path)}:{node.lineno} imports {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                top = (node.module or "").split(".")[0]
                assert top in sys.stdlib_module_names, f"{_name(path)}:{node.lineno} imports from {node.module}"
            else:  # `.` is this module's package; each further dot goes one package up
                assert node.level - 1 <= depth, f"{_name(path)}:{node.lineno} imports from outside inside/"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__"
              and node.args and isinstance(node.args[0], ast.Constant)):
            assert node.args[0].value in sys.stdlib_module_names, f"{_name(path)}:{node.lineno}"


def test_zygote_preimports_only_the_standard_library() -> None:
    assert set(zygote._PREIMPORT) <= sys.stdlib_module_names


def test_only_the_candidate_module_executes_the_program() -> None:
    found = {}
    for path in _modules(PACKAGE):
        calls = _execution_calls(ast.parse(path.read_text()))
        if calls:
            found[_name(path)] = calls
    assert found == EXECUTION_SITES
    touching = {name for name in EXECUTION_SITES if _touches_program(ast.parse((PACKAGE / name).read_text()))}
    assert touching == {MODEL_CODE_MODULE}


def test_guards_see_what_they_look_for() -> None:
    """The scanners themselves, on code that must trip them."""
    tree = ast.parse("import numpy\nos.execv(p, a)\nexec(compile(program, '<p>', 'exec'))\nrunpy.run_path(x)")
    assert _execution_calls(tree) == {"os.execv", "exec", "compile", "runpy.run_path"}
    assert _touches_program(tree)
    assert _touches_program(ast.parse("job.get('program')")) and not _touches_program(ast.parse("job['suite']"))
