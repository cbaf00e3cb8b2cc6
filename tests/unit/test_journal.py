"""The write-back journal (cachetier.write.journal): its index, bodies, notices, multipart parts,
recovery and check. Two Journal objects on one directory stand for two worker processes. The
SIGKILL tests of its crash order are tests/component/test_journal_kill.py."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachetier.write.journal import Journal, JournalError, Recovered, Staged, Upload, Version, listing_sql
from cachetier.write.records import prefix_end

DEAD_PID = 2**22 + 12345  # above Linux's pid_max limit: never a live process


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal(tmp_path / "journal", sync=False) as journal:
        yield journal


def staged_with(journal: Journal, data: bytes) -> Staged:
    staged = journal.stage()
    staged.write(data)
    return staged


def put(journal: Journal, key: str, seq: int, data: bytes = b"", *, bucket: str = "b", position: int = 0,
        last_modified: float = 0.0) -> Version:  # fmt: skip
    version = Version(bucket, key, seq, "put", f'"{hashlib.md5(data).hexdigest()}"', len(data), last_modified,
                      holders=("n1", "n2"), position=position)  # fmt: skip
    journal.commit(version, staged_with(journal, data))
    return version


def body(journal: Journal, version: Version) -> bytes:
    fd = journal.open_body(version)
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def notice(key: str, seq: int, bucket: str = "b") -> Version:
    return Version(bucket, key, seq, "put", '"e"', 5, holders=("n2",), position=-1)


def files_in(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


# ---- commit, look-ups, bodies ----------------------------------------------------------------------


def test_a_committed_version_is_found_with_its_body_and_attributes(journal: Journal) -> None:
    version = Version("b", "k", 1, "put", '"x"', 3, 12.5, "text/plain", {"a": "1"}, {"cache-control": "no"},
                      (1, 2), "t1", ("n1", "n2"), 1)  # fmt: skip
    journal.commit(version, staged_with(journal, b"abc"))
    assert journal.latest("b", "k") == version
    assert journal.latest("b", "k").md5 == hashlib.md5(b"abc").hexdigest()  # type: ignore[union-attr]  # noqa: S324
    assert journal.versions("b", "k") == [version]
    assert journal.last_seq("b", "k") == 1 and journal.last_seq("b", "other") == 0
    assert journal.latest("b", "other") is None and journal.versions("b", "other") == []
    assert body(journal, version) == b"abc"
    assert version.local and not notice("k", 1).local


def test_a_staged_body_counts_its_size_and_md5_and_abort_removes_it(journal: Journal) -> None:
    staged = journal.stage()
    staged.write(b"ab")
    staged.write(memoryview(b"cd"))
    assert staged.size == 4 and staged.md5_hex() == hashlib.md5(b"abcd").hexdigest()
    assert len(os.listdir(journal.tmp)) == 1
    staged.abort()
    staged.abort()  # idempotent
    assert os.listdir(journal.tmp) == []
    with pytest.raises(ValueError), journal.stage() as other:
        raise ValueError("the with block removes the staged body")
    assert other.path == "" and os.listdir(journal.tmp) == []


def test_versions_are_ascending_and_latest_is_the_highest_seq(journal: Journal) -> None:
    for seq in (2, 1, 3):
        put(journal, "k", seq, bytes([seq]))
    delete = Version("b", "k", 4, "delete", position=0)
    journal.commit(delete)
    assert [v.seq for v in journal.versions("b", "k")] == [1, 2, 3, 4]
    assert journal.latest("b", "k") == delete and journal.last_seq("b", "k") == 4
    with pytest.raises(FileNotFoundError):
        journal.open_body(delete)


def test_commit_refuses_mismatched_bodies_and_notices(journal: Journal) -> None:
    with pytest.raises(ValueError):
        journal.commit(Version("b", "k", 1, "put", size=1, position=0))  # no body
    with pytest.raises(ValueError):
        journal.commit(Version("b", "k", 1, "delete", position=0), staged_with(journal, b""))
    with pytest.raises(ValueError):
        journal.commit(Version("b", "k", 1, "put", size=2, position=0), staged_with(journal, b"x"))
    with pytest.raises(ValueError):
        journal.commit(notice("k", 1), staged_with(journal, b"x" * 5))
    with pytest.raises(ValueError):
        journal.commit(Version("b", "k", 1, "copy", position=0))
    assert journal.latest("b", "k") is None


def test_a_put_of_zero_bytes_has_an_empty_body(journal: Journal) -> None:
    version = put(journal, "empty", 1)
    assert body(journal, version) == b"" and journal.check() == []


def test_committing_the_same_seq_again_replaces_the_row_and_its_body(journal: Journal) -> None:
    put(journal, "k", 1, b"first")
    again = put(journal, "k", 1, b"second")
    assert journal.versions("b", "k") == [again]
    assert body(journal, again) == b"second"
    assert len(files_in(Path(journal.bodies))) == 1 and journal.check() == []


def test_two_journals_on_one_directory_see_each_others_commits(tmp_path: Path) -> None:
    with Journal(tmp_path, sync=False) as first, Journal(tmp_path, sync=False) as second:
        one = put(first, "k", 1, b"one")
        assert second.latest("b", "k") == one and body(second, one) == b"one"
        two = put(second, "k", 2, b"two")
        assert first.latest("b", "k") == two and first.last_seq("b", "k") == 2
        second.remove("b", "k", 1)
        assert first.versions("b", "k") == [two]


def test_threads_commit_through_one_journal(journal: Journal) -> None:
    def writer(index: int) -> None:
        for seq in range(1, 21):
            put(journal, f"k{index}", seq, b"x" * seq)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert journal.pending_objects() == 80 and journal.check() == []


def test_sync_true_commits_the_same_way(tmp_path: Path) -> None:
    with Journal(tmp_path, sync=True) as journal:
        version = put(journal, "k", 1, b"durable")
        assert body(journal, version) == b"durable"
        assert journal._query("PRAGMA synchronous")[0][0] == 2  # FULL
        assert journal._query("PRAGMA journal_mode")[0][0] == "wal"


def test_journal_is_an_os_error(journal: Journal) -> None:
    journal.close()
    with pytest.raises(OSError) as caught:
        journal.latest("b", "k")
    assert isinstance(caught.value, JournalError)


# ---- notices -----------------------------------------------------------------------------------------


def test_a_notice_never_replaces_a_local_version(journal: Journal) -> None:
    local = put(journal, "k", 1, b"mine")
    journal.note(notice("k", 1))
    assert journal.versions("b", "k") == [local] and body(journal, local) == b"mine"


def test_a_notice_is_seen_and_replaced_by_a_newer_notice_or_a_local_commit(journal: Journal) -> None:
    journal.note(notice("k", 1))
    newer = Version("b", "k", 1, "put", '"f"', 6, holders=("n3",), position=-1)
    journal.note(newer)
    assert journal.versions("b", "k") == [newer] and journal.latest("b", "k") == newer
    with pytest.raises(FileNotFoundError):
        journal.open_body(newer)
    local = put(journal, "k", 1, b"now local")
    assert journal.versions("b", "k") == [local]
    with pytest.raises(ValueError):
        journal.note(local)


def test_notices_count_in_neither_dirty_bytes_nor_local_versions(journal: Journal) -> None:
    journal.note(notice("n", 1))
    put(journal, "k", 1, b"abc")
    assert journal.dirty_bytes() == 3 and journal.pending_objects() == 1
    assert [v.key for v in journal.local_versions()] == ["k"]


# ---- listing -----------------------------------------------------------------------------------------


def test_listing_gives_the_latest_of_each_key_in_key_order(journal: Journal) -> None:
    for key in ("b/2", "a", "b/1", "c", "b/3"):
        put(journal, key, 1, key.encode())
    put(journal, "b/1", 2, b"newer")
    journal.commit(Version("b", "b/3", 2, "delete", position=0))
    journal.note(notice("b/2", 5))
    put(journal, "b/0", 1, bucket="other")
    listed = journal.listing("b", "b/", "", 10)
    assert [(v.key, v.seq, v.kind) for v in listed] == [("b/1", 2, "put"), ("b/2", 5, "put"), ("b/3", 2, "delete")]
    assert listed[0].size == 5 and not listed[1].local
    assert [v.key for v in journal.listing("b", "", "", 10)] == ["a", "b/1", "b/2", "b/3", "c"]
    assert [v.key for v in journal.listing("b", "", "b/1", 2)] == ["b/2", "b/3"]
    assert [v.key for v in journal.listing("b", "b/", "a", 1)] == ["b/1"]
    assert journal.listing("b", "b/", "b/3", 10) == [] and journal.listing("b", "z", "", 10) == []


def test_listing_prefixes_at_the_edges_of_unicode(journal: Journal) -> None:
    keys = ["a\U0010ffff", "a\U0010ffffz", "a\ud7ffb", "b", "\ue000"]
    for key in keys:
        put(journal, key, 1)
    assert [v.key for v in journal.listing("b", "a\U0010ffff", "", 10)] == keys[:2]
    assert [v.key for v in journal.listing("b", "a\ud7ff", "", 10)] == ["a\ud7ffb"]
    assert prefix_end("a\ud7ff") == "a\ue000" and prefix_end("\U0010ffff") is None


def test_listing_is_a_range_scan_of_an_index(journal: Journal) -> None:
    def plan(strict: bool, bounded: bool) -> str:
        args = ["b", "a/"] + ["a0"] * bounded + [10]
        return " ".join(row[3] for row in journal._query(f"EXPLAIN QUERY PLAN {listing_sql(strict, bounded)}", *args))

    assert plan(True, True) == "SEARCH versions USING PRIMARY KEY (bucket=? AND key>? AND key<?)"
    assert plan(False, True) == "SEARCH versions USING PRIMARY KEY (bucket=? AND key>? AND key<?)"
    assert plan(True, False) == "SEARCH versions USING PRIMARY KEY (bucket=? AND key>?)"  # no sort either


# ---- remove --------------------------------------------------------------------------------------------


def test_remove_drops_versions_up_to_a_seq_and_their_bodies(journal: Journal) -> None:
    old = [put(journal, "k", seq, b"v%d" % seq) for seq in (1, 2)]
    kept = put(journal, "k", 3, b"v3")
    assert journal.remove("b", "k", 2) == old
    assert journal.versions("b", "k") == [kept]
    assert len(files_in(Path(journal.bodies))) == 1 and journal.check() == []
    assert journal.remove("b", "k", 2) == []


def test_remove_commits_the_rows_before_unlinking_the_bodies(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    version = put(journal, "k", 1, b"gone")

    def crash(path: str) -> None:  # a crash between the commit and the unlink
        assert journal.versions("b", "k") == []
        raise KeyboardInterrupt

    monkeypatch.setattr("cachetier.write.journal._unlink", crash)
    with pytest.raises(KeyboardInterrupt):
        journal.remove("b", "k", 1)
    monkeypatch.undo()
    assert journal.check() == [f"body file {next(iter(journal._files()[0]))} is named by no row"]
    assert journal.recover().orphans == 1 and journal.check() == []
    with pytest.raises(FileNotFoundError):
        journal.open_body(version)


# ---- local rows, flushing, counters ---------------------------------------------------------------------


def test_local_versions_counters_and_positions(journal: Journal) -> None:
    put(journal, "a", 3, b"xx", position=0, last_modified=30.0)
    put(journal, "b", 1, b"yyy", position=1, last_modified=10.0)
    put(journal, "c", 2, b"z", position=1, last_modified=20.0)
    assert [(v.key, v.seq) for v in journal.local_versions()] == [("b", 1), ("c", 2), ("a", 3)]
    assert [v.key for v in journal.local_versions(limit=2)] == ["b", "c"]
    assert journal.dirty_bytes() == 6 and journal.pending_objects() == 3
    assert journal.positions() == {0: (1, 2, 30.0), 1: (2, 4, 10.0)}


def test_an_empty_journal_counts_nothing(journal: Journal) -> None:
    assert journal.dirty_bytes() == 0 and journal.pending_objects() == 0 and journal.positions() == {}
    assert journal.local_versions() == [] and journal.check() == []


def test_flushing_marks_count_only_for_live_processes(journal: Journal) -> None:
    first, second = put(journal, "k", 1, b"1"), put(journal, "k", 2, b"2")
    journal.begin_flush(first, os.getpid())
    journal.begin_flush(second, DEAD_PID)
    assert journal.flushing("b", "k") == [1]
    journal.end_flush(first)
    assert journal.flushing("b", "k") == [] and journal.flushing("b", "other") == []


def test_mark_verified(journal: Journal) -> None:
    put(journal, "k", 1, b"x")
    journal.recover()
    version = journal.latest("b", "k")
    assert version is not None and not version.verified
    journal.mark_verified(version)
    assert (journal.latest("b", "k") or version).verified


# ---- multipart -----------------------------------------------------------------------------------------


def test_an_upload_is_created_listed_and_dropped(journal: Journal) -> None:
    journal.create_upload("u2", "b", "k", {"content_type": "x/y", "metadata": {"a": "1"}}, "t", 5.0)
    journal.create_upload("u1", "b", "k", {}, "t", 6.0)
    journal.create_upload("u0", "b", "z", {}, "t", 7.0)
    journal.create_upload("u9", "other", "k", {}, "t", 8.0)
    assert journal.upload("u2") == Upload("u2", "b", "k", {"content_type": "x/y", "metadata": {"a": "1"}}, "t", 5.0)
    assert journal.upload("nope") is None
    assert [u.upload_id for u in journal.uploads("b")] == ["u1", "u2", "u0"]
    with pytest.raises(ValueError):
        journal.create_upload("u1", "b", "k", {}, "t", 6.0)
    journal.commit_part("u2", 1, staged_with(journal, b"part"))
    journal.drop_upload("u2")
    assert journal.upload("u2") is None and journal.parts("u2") == []
    assert os.listdir(journal.part_files) == [] and journal.check() == []


def test_parts_are_committed_replaced_and_assembled(journal: Journal) -> None:
    journal.create_upload("u", "b", "k", {}, "t", 1.0)
    pieces = {1: os.urandom(3 << 20 | 7), 2: b"second", 3: b""}
    for number, data in pieces.items():
        etag = journal.commit_part("u", number, staged_with(journal, data), last_modified=float(number))
        assert etag == f'"{hashlib.md5(data).hexdigest()}"'
    journal.commit_part("u", 2, staged_with(journal, b"SECOND"), last_modified=9.0)
    pieces[2] = b"SECOND"
    assert journal.parts("u") == [
        (n, f'"{hashlib.md5(d).hexdigest()}"', len(d), 9.0 if n == 2 else float(n)) for n, d in pieces.items()
    ]
    assert len(os.listdir(journal.part_files)) == 3
    staged = journal.assemble("u", [2, 1, 3])
    whole = pieces[2] + pieces[1] + pieces[3]
    assert staged.size == len(whole) and staged.md5_hex() == hashlib.md5(whole).hexdigest()
    version = Version("b", "k", 1, "put", '"m-2"', len(whole), part_sizes=(6, len(pieces[1])), position=0)
    journal.commit(version, staged)
    assert body(journal, version) == whole
    with pytest.raises(KeyError):
        journal.assemble("u", [1, 4])
    assert os.listdir(journal.tmp) == []


def test_a_part_of_an_unknown_upload_is_refused_and_removed(journal: Journal) -> None:
    with pytest.raises(KeyError):
        journal.commit_part("none", 1, staged_with(journal, b"x"))
    assert os.listdir(journal.part_files) == [] and os.listdir(journal.tmp) == []


# ---- recovery and check --------------------------------------------------------------------------------


def test_recover_removes_leftovers_and_notices_and_resets_marks(journal: Journal) -> None:
    kept = put(journal, "k", 1, b"kept")
    journal.commit(Version("b", "k", 2, "delete", position=0))
    journal.begin_flush(kept, os.getpid())
    journal.note(notice("n", 1))
    journal.create_upload("u", "b", "m", {}, "t", 1.0)
    journal.commit_part("u", 1, staged_with(journal, b"part"))
    staged_with(journal, b"never committed")  # a tmp file
    os.makedirs(os.path.join(journal.bodies, "ab"), exist_ok=True)
    Path(journal.bodies, "ab", "ab" + "0" * 30).write_bytes(b"orphan")  # a body no row names
    Path(journal.part_files, "f" * 32).write_bytes(b"orphan part")
    assert len(journal.check()) == 2
    assert journal.recover() == Recovered(bodies=2, orphans=3, notices=1)
    assert journal.check() == [] and os.listdir(journal.tmp) == []
    assert journal.latest("b", "n") is None and journal.flushing("b", "k") == []
    assert [v.verified for v in journal.local_versions()] == [False, False]
    assert body(journal, kept) == b"kept" and journal.parts("u")[0][2] == 4


def test_a_commit_that_fails_before_its_row_leaves_nothing(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*args: object) -> None:
        raise JournalError("disk gone")

    monkeypatch.setattr(Journal, "_index", lambda self, write=False: crash())
    with pytest.raises(JournalError):
        put(journal, "k", 1, b"lost")
    monkeypatch.undo()
    assert journal.latest("b", "k") is None and files_in(Path(journal.bodies)) == []
    assert os.listdir(journal.tmp) == []


def test_check_finds_a_missing_body_and_a_missing_part(journal: Journal) -> None:
    version = put(journal, "k", 1, b"x")
    journal.create_upload("u", "b", "m", {}, "t", 1.0)
    journal.commit_part("u", 1, staged_with(journal, b"p"))
    for path in files_in(Path(journal.bodies)) + files_in(Path(journal.part_files)):
        path.unlink()
    problems = journal.check()
    assert len(problems) == 2 and "missing" in problems[0] and "part row" in problems[1]
    with pytest.raises(FileNotFoundError):
        journal.open_body(version)


def test_reopening_a_journal_keeps_its_versions(tmp_path: Path) -> None:
    with Journal(tmp_path, sync=False) as journal:
        version = put(journal, "k", 1, b"again")
    with Journal(tmp_path, sync=False) as journal:
        assert journal.latest("b", "k") == version and body(journal, version) == b"again"


def test_a_notice_or_copy_of_a_version_removed_already_is_ignored(journal: Journal) -> None:
    """remove() marks the key's versions up to its seq gone: a re-announcement or a late copy
    that crossed the flush does not come back as pending."""
    journal.note(notice("k", 5))
    journal.remove("b", "k", 5)
    journal.note(notice("k", 5))
    journal.note(notice("k", 4))
    late = Version("b", "k", 5, "put", '"x"', 3, holders=("n1", "n2"), position=1)
    journal.commit(late, staged_with(journal, b"abc"))
    assert journal.versions("b", "k") == [] and journal.check() == []
    journal.note(notice("k", 6))  # a newer one is pending as before
    assert [v.seq for v in journal.versions("b", "k")] == [6]


def test_a_flush_begins_only_on_a_version_still_here_and_its_mark_outlives_the_removal(journal: Journal) -> None:
    first, second = put(journal, "k", 1, b"1"), put(journal, "k", 2, b"2")
    assert journal.begin_flush(first, os.getpid())
    journal.remove("b", "k", 2)  # a newer write: the rows go, the flush already begun is still seen
    assert journal.flushing("b", "k") == [1]
    assert not journal.begin_flush(second, os.getpid()) and journal.flushing("b", "k") == [1]
    journal.end_flush(first)
    assert journal.flushing("b", "k") == []
