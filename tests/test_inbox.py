"""The inbox journal: accepted updates survive a crash; finished ones are not redone."""

from __future__ import annotations

import json
import subprocess
import sys
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


_TORN_CHILD = r"""
import json, resource, signal, sys
import json
import subprocess
import sys
from pathlib import Path

from botkit.errors import SessionError
from botkit.runtime.inbox import Inbox

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # os.write returns short, then raises EFBIG
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
path = Path(sys.argv[1])
inbox = Inbox(path)
inbox.accept(1, {"update_id": 1, "text": "first"})
resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 100, hard))
try:
    inbox.accept(2, {"update_id": 2, "text": "x" * 10_000})
    failed = False
except SessionError:
    failed = True
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
inbox.accept(3, {"update_id": 3, "text": "third"})
inbox.close()
print(json.dumps({"failed": failed, "pending": [i.update_id for i in Inbox(path).pending()]}))
"""


def test_a_journal_line_cut_short_never_swallows_the_next(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    child = subprocess.run(
        [sys.executable, "-c", _TORN_CHILD, str(path)], capture_output=True, check=True
    )
    facts = json.loads(child.stdout.splitlines()[-1])  # after any log lines
    assert facts["failed"], "a write cut short is an error, not a half-journaled update"
    assert facts["pending"] == [1, 3], "the update accepted after it is kept"
