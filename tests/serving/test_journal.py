"""The proxy's append-only session journal."""

import pytest

from serving.journal import JournalError, SessionJournal


def test_entries_come_back_in_order_and_a_torn_last_line_is_cut(tmp_path):
    journal = SessionJournal(tmp_path)
    journal.start({"session_id": "team/s:1", "tenant": "acme"})
    journal.append("team/s:1", {"turns": [1]})
    with journal.path("team/s:1").open("a") as fh:
        fh.write('{"kind": "turns", "tur')  # a crash in the middle of a write
    entries = journal.read("team/s:1")
    assert [e["kind"] for e in entries] == ["start", "turns"]
    journal.append("team/s:1", {"turns": [2]})  # appends on a clean line
    assert [e.get("turns") for e in journal.read("team/s:1")] == [None, [1], [2]]
    assert journal.session_ids() == ["team/s:1"]
    journal.delete("team/s:1")
    assert journal.read("team/s:1") is None and journal.session_ids() == []


def test_a_torn_header_means_no_session_and_a_corrupt_middle_line_is_an_error(tmp_path):
    journal = SessionJournal(tmp_path)
    journal.path("s-1").write_text('{"kind": "sta')
    assert journal.session_ids() == [] and journal.read("s-1") is None
    journal.start({"session_id": "s-2"})
    with journal.path("s-2").open("a") as fh:
        fh.write("garbage\n")
    journal.append("s-2", {"turns": []})
    with pytest.raises(JournalError, match="line 2"):
        journal.read("s-2")
