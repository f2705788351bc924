"""The one atomic-write helper: a failed write leaves the old file and no temporary behind."""

import errno
import os

import pytest

from reasoning_rl.errors import StorageError
from reasoning_rl.run_folder import atomic
from reasoning_rl.run_folder.atomic import atomic_directory_write, atomic_write_bytes, atomic_write_text


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


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


def test_a_full_disk_while_writing_a_file_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    atomic_write_text(path, "old")
    monkeypatch.setattr(atomic.os, "fsync", _disk_full)  # the data does not fit on the disk
    with pytest.raises(StorageError) as info:  # an OSError too: one line naming the file (exit code 2)
        atomic_write_text(path, "new")
    assert info.value.__cause__.errno == errno.ENOSPC
    assert str(info.value).startswith(f"cannot write {path}: its disk is full (")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_directory_write_is_all_or_nothing(tmp_path):
    final = tmp_path / "checkpoint-1"
    atomic_directory_write(final, lambda d: (d / "a.txt").write_text("1"))

    def dies(d):
        (d / "b.txt").write_text("partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_directory_write(final, dies)
    assert sorted(p.name for p in final.iterdir()) == ["a.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-1"]  # no .checkpoint-1.tmp left behind


def test_a_full_disk_in_a_first_directory_write_leaves_nothing(tmp_path):
    def fills_the_disk(d):
        (d / "model.safetensors").write_bytes(b"\0" * 64)
        _disk_full()

    with pytest.raises(StorageError) as info:
        atomic_directory_write(tmp_path / "checkpoint-7", fills_the_disk)
    assert info.value.__cause__.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # neither checkpoint-7 nor .checkpoint-7.tmp


@pytest.mark.parametrize("said", [
    "[enforce fail at inline_container.cc:672] . unexpected pos 3536576 vs 3536464",  # torch.save, mid-file
    "[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0: file write failed",
    "Error while serializing: I/O error: No space left on device (os error 28)",  # safetensors
])
def test_a_checkpoint_write_refused_for_space_is_a_full_disk_naming_the_folder(tmp_path, monkeypatch, said):
    # torch's words never mention space; the run used to end with a 60-line traceback and exit code 1.
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("shutil.disk_usage", lambda path: usage(10**9, 10**9 - 112, 112))

    def torch_save_fails(d):
        (d / "trainer_state.pt").write_bytes(b"\0" * 64)
        raise RuntimeError(said)

    final = tmp_path / "checkpoint-3"
    with pytest.raises(StorageError) as info:
        atomic_directory_write(final, torch_save_fails)
    assert str(info.value) == (f"cannot write {final}: its disk is full (112 bytes free there; the write failed with "
                               f"RuntimeError: {said}); free some space there or write elsewhere")
    assert list(tmp_path.iterdir()) == []


def test_any_other_failure_of_a_write_stays_what_it_is(tmp_path):
    def bug(d):
        raise RuntimeError("unexpected keyword argument")

    with pytest.raises(RuntimeError) as info:
        atomic_directory_write(tmp_path / "checkpoint-1", bug)
    assert not isinstance(info.value, StorageError)


def test_a_failed_swap_puts_the_old_directory_back(tmp_path, monkeypatch):
    final = tmp_path / "reference"
    atomic_directory_write(final, lambda d: (d / "a.txt").write_text("old"))
    replace = os.replace

    def second_rename_fails(src, dst):  # old aside works, new into place does not
        if str(src).endswith(".tmp"):
            _disk_full()
        replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", second_rename_fails)
    with pytest.raises(OSError):
        atomic_directory_write(final, lambda d: (d / "a.txt").write_text("new"))
    assert (final / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["reference"]


def test_a_kill_between_the_two_renames_is_repaired_by_the_next_write(tmp_path):
    # What a kill after "old aside" and before "new in" leaves: the complete old folder, hidden.
    old = tmp_path / ".checkpoint-3.old"
    old.mkdir()
    (old / "a.txt").write_text("old")

    def sees_the_old_one(d):
        assert (tmp_path / "checkpoint-3" / "a.txt").read_text() == "old"  # restored before writing
        (d / "a.txt").write_text("new")

    atomic_directory_write(tmp_path / "checkpoint-3", sees_the_old_one)
    assert (tmp_path / "checkpoint-3" / "a.txt").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-3"]
