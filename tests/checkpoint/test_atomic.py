"""Atomic writes: a published directory replaces the old one whole; the newest N are kept."""

from rlvr.checkpoint.atomic import fresh_tmp_dir, keep_last, publish_dir, write_text_atomic


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
