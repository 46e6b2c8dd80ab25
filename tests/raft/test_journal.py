"""The durable journal PySyncObj writes through: persistence, torn tails, truncation."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import orjson
import pytest

from jetserver.raft.journal import MAGIC, DurableJournal, JournalCorrupt, encode_record


def fill(journal: DurableJournal, n: int, start: int = 1, term: int = 1) -> None:
    for i in range(start, start + n):
        journal.add(f"cmd{i}".encode(), i, term)


def test_entries_term_vote_and_commit_index_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "raft" / "journal.log"
    journal = DurableJournal(path)
    fill(journal, 3)
    journal.setCurrentTerm(4, "127.0.0.1:1")
    journal.setRaftCommitIndex(2)
    journal._destroy()
    again = DurableJournal(path)
    assert list(again[:]) == [(b"cmd1", 1, 1), (b"cmd2", 2, 1), (b"cmd3", 3, 1)]
    assert again[-1] == (b"cmd3", 3, 1)
    assert len(again) == 3
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (4, "127.0.0.1:1")
    assert again.getRaftCommitIndex() == 2
    meta = orjson.loads(path.with_name("journal.log.meta.json").read_bytes())
    assert meta == {"term": 4, "voted_for": "127.0.0.1:1", "commit_index": 2}
    again._destroy()


def test_defaults_of_a_new_journal(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path / "j.log")
    assert (len(journal), journal.getCurrentTerm(), journal.getVotedForNodeId()) == (0, 0, None)
    assert journal.getRaftCommitIndex() == 1
    journal._destroy()
    assert (tmp_path / "j.log").read_bytes() == MAGIC


def test_commit_index_is_stored_by_the_one_second_timer(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    journal = DurableJournal(path)
    journal.setRaftCommitIndex(9)
    journal.onOneSecondTimer()
    assert DurableJournal(path).getRaftCommitIndex() == 9
    journal._destroy()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip"])
def test_a_torn_or_corrupt_tail_is_cut_at_the_last_good_record(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j.log"
    journal = DurableJournal(path)
    fill(journal, 3)
    journal._destroy()
    good = len(MAGIC) + sum(len(encode_record(f"cmd{i}".encode(), i, 1)) for i in (1, 2))
    size = path.stat().st_size
    with path.open("r+b") as f:
        if damage == "truncate":
            f.truncate(size - 3)
        elif damage == "garbage":
            f.truncate(good)
            f.seek(good)
            f.write(b"\x05\x00\x00\x00junk")
        else:
            f.seek(size - 1)
            last = f.read(1)
            f.seek(size - 1)
            f.write(bytes([last[0] ^ 0x01]))
    with caplog.at_level(logging.WARNING, logger="jetserver.raft.journal"):
        again = DurableJournal(path)
    assert [e[1] for e in again[:]] == [1, 2]
    assert path.stat().st_size == good
    assert any("torn or corrupt tail" in r.getMessage() for r in caplog.records)
    again.add(b"cmd3b", 3, 2)
    again._destroy()
    assert [e[0] for e in DurableJournal(path)[:]] == [b"cmd1", b"cmd2", b"cmd3b"]


def test_delete_entries_from_truncates_the_file(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    journal = DurableJournal(path)
    fill(journal, 5)
    journal.deleteEntriesFrom(2)
    journal.deleteEntriesFrom(7)  # past the end: nothing to do
    journal.add(b"new3", 3, 2)
    journal._destroy()
    assert list(DurableJournal(path)[:]) == [(b"cmd1", 1, 1), (b"cmd2", 2, 1), (b"new3", 3, 2)]


def test_delete_entries_to_rewrites_atomically_and_appends_continue(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    journal = DurableJournal(path)
    fill(journal, 5)
    journal.deleteEntriesTo(3)
    assert [e[1] for e in journal[:]] == [4, 5]
    journal.add(b"cmd6", 6, 1)
    journal.deleteEntriesFrom(2)
    journal.add(b"cmd6b", 6, 3)
    journal._destroy()
    assert not path.with_name("j.log.tmp").exists()
    assert list(DurableJournal(path)[:]) == [(b"cmd4", 4, 1), (b"cmd5", 5, 1), (b"cmd6b", 6, 3)]


def test_clear_then_add(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    journal = DurableJournal(path, fsync=False)
    fill(journal, 3)
    journal.clear()
    journal.add(b"x", 10, 4)
    journal._destroy()
    assert list(DurableJournal(path)[:]) == [(b"x", 10, 4)]


def test_not_a_journal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    path.write_bytes(b"PYSYNCOBJ\0\0\0 something else")
    with pytest.raises(JournalCorrupt, match="not a jet raft journal"):
        DurableJournal(path)
    (tmp_path / "k.log.meta.json").write_bytes(b"{nope")
    with pytest.raises(JournalCorrupt, match="not valid JSON"):
        DurableJournal(tmp_path / "k.log")


def test_files_are_private(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path / "j.log")
    journal.setCurrentTerm(1, None)
    journal._destroy()
    assert os.stat(tmp_path / "j.log").st_mode & 0o077 == 0
