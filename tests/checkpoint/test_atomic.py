"""Atomic writes: a published directory replaces the old one whole; the newest N are kept; a
write that fails (disk full) leaves nothing half-written and is told from a bug."""

import errno
import subprocess
import sys

import pytest
from safetensors import SafetensorError

from rlvr.checkpoint.atomic import (fresh_tmp_dir, keep_last, publish_dir, save_dir_atomic,
                                    write_failure, write_text_atomic)
from rlvr.run.errors import SaveFailed


def test_publish_replaces_a_directory_whole_and_cleans_temporaries(tmp_path):
    target = tmp_path / "step_000001"
    for text in ("first", "second"):
        tmp = fresh_tmp_dir(target)
        (tmp / "a.txt").write_text(text)
        publish_dir(tmp, target)
    assert (target / "a.txt").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001"]


def test_a_crash_leftover_is_removed_by_the_next_write(tmp_path):
    (tmp_path / ".tmp-step_000002").mkdir()  # a save killed midway
    tmp = fresh_tmp_dir(tmp_path / "step_000003")
    assert not (tmp_path / ".tmp-step_000002").exists() and tmp.exists()


def test_keep_last(tmp_path):
    series = [tmp_path / f"s{i}" for i in range(4)]
    for p in series:
        p.mkdir()
    keep_last(series, 2)
    assert [p.exists() for p in series] == [False, False, True, True]
    keep_last(series[2:], -1)
    assert all(p.exists() for p in series[2:])


def test_write_text_atomic(tmp_path):
    path = tmp_path / "x.yaml"
    write_text_atomic(path, "a: 1\n")
    write_text_atomic(path, "a: 2\n")
    assert path.read_text() == "a: 2\n" and sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]


# ---- a failed write is told from a bug -------------------------------------------------------

# Real writers failing as on a full disk, without root: a file size limit (RLIMIT_FSIZE) makes
# each write past 4 kB fail with EFBIG, in a process of its own.
_WRITERS_PAST_THE_LIMIT = """
import resource, signal, sys, torch
from safetensors.torch import save_file
from rlvr.checkpoint.atomic import write_failure
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
tensors, out = {"w": torch.zeros(10000)}, sys.argv[1]
def trainer_pt():  # as rlvr.checkpoint.state writes it: through a file object
    with open(out + "/trainer.pt", "wb") as f:
        torch.save(tensors, f)
for write in (trainer_pt, lambda: save_file(tensors, out + "/policy.safetensors")):
    try:
        write()
        print("written")
    except Exception as e:
        print(type(e).__name__, "->", write_failure(e))
"""


def test_torch_and_safetensors_write_failures_are_told_from_bugs(tmp_path):
    result = subprocess.run([sys.executable, "-c", _WRITERS_PAST_THE_LIMIT, str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # torch: RuntimeError("unexpected pos"), raised while its file's OSError was handled
    torch_line, safetensors_line = result.stdout.splitlines()
    assert torch_line == "RuntimeError -> OSError: [Errno 27] File too large"
    assert safetensors_line.startswith("SafetensorError -> SafetensorError: ")
    assert "File too large" in safetensors_line
    assert write_failure(RuntimeError("a bug")) is None
    assert write_failure(TypeError("cannot pickle 'generator' object")) is None
    assert write_failure(SafetensorError("tensor is not contiguous")) is None


def test_a_failed_write_removes_its_temporary_and_keeps_the_earlier_copy(tmp_path):
    target = tmp_path / "step_000001"
    save_dir_atomic(target, lambda tmp: (tmp / "a.txt").write_text("good"), "the state", "")

    def full_disk(tmp):
        (tmp / "a.txt").write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(SaveFailed, match=r"writing the state .*step_000001 failed \(OSError: "
                                         r"\[Errno 28\] No space left on device\); nothing "
                                         "half-written is left, and the one before is kept"):
        save_dir_atomic(target, full_disk, "the state", "the one before is kept")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001"]
    assert (target / "a.txt").read_text() == "good"

    def bug(tmp):
        (tmp / "a.txt").write_text("half")
        raise KeyError("a bug")

    with pytest.raises(KeyError):  # not a write failure: raised as it was, traceback and all
        save_dir_atomic(target, bug, "the state", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001"]
