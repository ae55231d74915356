"""Crash-safe files: a replaced file is the old one or the new one, appends return the length on disk."""

import pytest

from ingest.durable import append_durable, fsync_tree, replacing


def test_a_replaced_file_changes_in_one_step_and_a_failed_write_leaves_it_alone(tmp_path):
    path = tmp_path / "routes.json"
    path.write_text("old")
    with replacing(path) as tmp:
        tmp.write_text("new")
        assert path.read_text() == "old" and tmp.parent == path.parent
    assert path.read_text() == "new"
    with pytest.raises(RuntimeError), replacing(path, fsync=False) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash while writing")
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["routes.json"]


def test_appends_return_the_length_and_a_new_file_is_never_appended_to(tmp_path):
    path = tmp_path / "journal.jsonl"
    assert append_durable(path, b'{"kind": "start"}\n', new=True) == 18
    assert append_durable(path, b"{}\n") == 21 and append_durable(path, b"") == 21
    with pytest.raises(FileExistsError):
        append_durable(path, b'{"kind": "start"}\n', new=True)
    assert path.read_bytes() == b'{"kind": "start"}\n{}\n'
    fsync_tree(tmp_path)  # files and folders alike
