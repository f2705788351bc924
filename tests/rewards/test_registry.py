"""Registry: decorator, options, duplicate and unknown names, entry-point plugins."""

import subprocess
import sys
import textwrap

import pytest

import rewards
from rewards import (
    VerifierNotFoundError,
    get_verifier,
    list_verifiers,
    register_verifier,
    unregister_verifier,
)


@pytest.fixture
def clean_names():
    names = []
    yield names
    for n in names:
        unregister_verifier(n)


def test_function_verifier_with_options(clean_names):
    clean_names.append("t_exact")

    @register_verifier("t_exact")
    def exact(completion, reference, *, strip=True, **fields):
        return float((completion.strip() if strip else completion) == reference)

    assert get_verifier("t_exact")(" a ", "a").score == 1.0
    assert get_verifier("t_exact", strip=False)(" a ", "a").score == 0.0
    assert "t_exact" in list_verifiers()


def test_function_options_are_checked(clean_names):
    clean_names.append("t_strict")

    @register_verifier("t_strict")
    def strict(completion, reference, *, strip=True):
        return 1.0

    with pytest.raises(TypeError, match="no option"):
        get_verifier("t_strict", stirp=False)


def test_class_verifier_gets_options_in_constructor(clean_names):
    clean_names.append("t_class")

    @register_verifier("t_class")
    class Threshold:
        def __init__(self, at: float = 0.5):
            self.at = at

        def __call__(self, completion, reference, **fields):
            return rewards.VerifierResult.ok(float(float(completion) >= self.at))

    assert get_verifier("t_class", at=2.0)("1.5", None).score == 0.0
    with pytest.raises(TypeError, match="t_class"):
        get_verifier("t_class", nope=1)


def test_duplicate_name_is_an_error(clean_names):
    clean_names.append("t_dup")

    @register_verifier("t_dup")
    def first(completion, reference, **fields):
        return 1.0

    with pytest.raises(ValueError, match="already registered"):

        @register_verifier("t_dup")
        def second(completion, reference, **fields):
            return 0.0


def test_unknown_name_lists_known_and_suggests():
    with pytest.raises(VerifierNotFoundError) as info:
        get_verifier("fromat")
    message = str(info.value)
    assert "Did you mean 'format'" in message
    assert "Known verifiers:" in message and "math" in message


def test_entry_point_plugin_is_found_by_name(tmp_path):
    """A third-party package installed with pip registers a verifier through the
    `reasoning_rl.verifiers` entry-point group; it is found by name with no change here,
    and scored in worker processes."""
    src = tmp_path / "my_verifier_pkg"
    (src / "my_verifier").mkdir(parents=True)
    (src / "my_verifier" / "__init__.py").write_text(textwrap.dedent("""
        def shout(completion, reference, **fields):
            return float(completion.upper() == completion and reference in completion)
    """))
    (src / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "my-verifier"
        version = "0.1"
        [project.entry-points."reasoning_rl.verifiers"]
        shout = "my_verifier:shout"
        [tool.setuptools]
        packages = ["my_verifier"]
    """))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(src)], check=True)
    code = textwrap.dedent("""
        import rewards
        assert "shout" in rewards.list_verifiers(), rewards.list_verifiers()
        v = rewards.get_verifier("shout")
        batch = rewards.score_batch(v, ["HELLO", "hello"], ["HELLO", "HELLO"], timeout=10)
        print(batch.scores)
    """)
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[1.0, 0.0]"


def test_the_code_digest_follows_the_verifiers_source(tmp_path, monkeypatch, clean_names):
    """Cached benchmark scores carry the digest of the verifier's code (benchmarks.runner.make_verifier):
    an edit to the module that defines it changes it; the built-in ones hash their whole package."""
    from rewards.registry import verifier_code_digest

    module = tmp_path / "digest_verifiers.py"
    module.write_text("import rewards\n\n@rewards.register_verifier('digest_probe')\n"
                      "def probe(completion, reference, **fields):\n    return float(completion == reference)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import digest_verifiers  # noqa: F401 -- registers digest_probe

    clean_names.append("digest_probe")
    before = verifier_code_digest("digest_probe")
    assert before == verifier_code_digest("digest_probe") and len(before) == 16
    module.write_text(module.read_text().replace("completion == reference", "completion.strip() == reference"))
    assert verifier_code_digest("digest_probe") != before
    assert verifier_code_digest("math") == verifier_code_digest("math_verify")  # both in rewards/math/
    assert verifier_code_digest("math") != verifier_code_digest("code")
