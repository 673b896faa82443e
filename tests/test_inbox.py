"""The inbox journal: accepted updates survive a crash; finished ones are not redone."""

from __future__ import annotations

from pathlib import Path

from botkit.runtime.inbox import Inbox


def test_unfinished_updates_come_back_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    for update_id in (10, 11, 12):
        assert inbox.accept(update_id, {"update_id": update_id, "text": f"m{update_id}"})
    inbox.done(11)

    restarted = Inbox(path)
    assert [item.update_id for item in restarted.pending()] == [10, 12]
    assert restarted.pending()[0].payload == {"update_id": 10, "text": "m10"}


def test_a_redelivered_update_is_not_accepted_twice(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.accept(5, {})
    inbox.done(5)
    assert not inbox.accept(5, {}), "same process"
    assert not Inbox(path).accept(5, {}), "after a restart, too"


def test_torn_last_line_loses_only_that_line(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.accept(1, {"a": 1})
    with path.open("ab") as f:
        f.write(b'{"accepted": 2, "upd')
    restarted = Inbox(path)
    assert [item.update_id for item in restarted.pending()] == [1]
    restarted.accept(3, {})
    assert [item.update_id for item in Inbox(path).pending()] == [1, 3]


def test_journal_is_compacted_to_what_is_unfinished(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    for update_id in range(100):
        inbox.accept(update_id, {"n": update_id})
        if update_id != 50:
            inbox.done(update_id)
    inbox.compact()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2, "the remembered ids and the one unfinished update"
    assert [item.update_id for item in Inbox(path).pending()] == [50]
    assert not Inbox(path).accept(99, {}), "recent ids are remembered across compaction"
