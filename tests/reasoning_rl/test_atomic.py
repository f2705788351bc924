"""The one atomic-write helper: a failed write leaves the old file and no temporary behind."""

import pytest

from reasoning_rl.atomic import atomic_directory_write, atomic_write_bytes, atomic_write_text


def test_write_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "result.json"
    atomic_write_text(path, "old")
    atomic_write_text(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert path.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777  # readable like any file


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "result.bin"
    atomic_write_bytes(path, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.bin"]


def test_directory_write_is_all_or_nothing(tmp_path):
    final = tmp_path / "checkpoint-1"
    atomic_directory_write(final, lambda d: (d / "a.txt").write_text("1"))

    def dies(d):
        (d / "b.txt").write_text("partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_directory_write(final, dies)
    assert sorted(p.name for p in final.iterdir()) == ["a.txt"]
