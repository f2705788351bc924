"""The README's "Add your own verifier" example runs as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _section_code_blocks(title: str, lang: str) -> list[str]:
    text = README.read_text()
    section = text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.DOTALL)


def test_add_your_own_verifier_example(tmp_path):
    module, usage = _section_code_blocks("Add your own verifier", "python")
    assert module.startswith("# my_verifiers.py")
    (tmp_path / "my_verifiers.py").write_text(module)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", usage], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[1.0, 0.0]"


def test_readme_commands_are_the_ci_commands():
    """`.ci/run` calls exactly the README's test command."""
    bash_blocks = _section_code_blocks("The two commands", "bash")
    main_job, tests = (b.strip() for b in bash_blocks[:2])
    assert main_job.endswith("reasoning-rl-train")
    ci = (README.parent / ".ci" / "run").read_text()
    assert tests in ci.splitlines()
