"""A real MLflow tracking server on 127.0.0.1 with a SQLite store, started and stopped per test module."""

import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import free_port


def _answers(uri: str) -> bool:
    try:
        with urllib.request.urlopen(uri + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """The URI of a fresh ``mlflow server`` (SQLite backend, local artifact folder); stopped afterwards."""
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install -e '.[mlflow]'; .ci/trackers.sh)")
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    with (root / "server.log").open("w") as server_log:
        proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                                 "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                                 "--artifacts-destination", str(root / "artifacts")],
                                cwd=root, stdout=server_log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not _answers(uri):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
