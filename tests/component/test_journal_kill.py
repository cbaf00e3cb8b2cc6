"""Process tests of the write-back journal (cachetier.write.journal). Crash: a child python commits
versions (puts of 0..300 KiB, deletes, multipart assemblies) and removes them, printing each
step once it returned, and is SIGKILLed at random moments; after ``recover`` every commit that
returned is there with its bytes, nothing unnamed or staged is left, and ``check`` is clean.
Sharing: worker processes open one fresh journal at once and commit into it together.
Component tier for its child processes; the journal's other tests are tests/unit/test_journal.py.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

from cachetier.write.journal import Journal

REPO = Path(__file__).resolve().parents[2]
TRIALS = 24

_CHILD = """
import hashlib, random, sys, uuid
from cachetier.write.journal import Journal, Version

journal = Journal(sys.argv[1])  # sync=True: the order under test is the real one
rng = random.Random(int(sys.argv[2]))

def say(*words):
    print(*words, flush=True)

def staged_of(data):
    staged = journal.stage()
    for start in range(0, len(data), 64 * 1024):
        staged.write(data[start:start + 64 * 1024])
    return staged

def version(key, kind, size, **more):
    return Version("b", key, journal.last_seq("b", key) + 1, kind, size=size, holders=("n1",), position=0, **more)

say("ready")
while True:
    key = f"k{rng.randrange(12)}"
    action = rng.random()
    if action < 0.6:
        data = rng.randbytes(rng.randrange(300 * 1024 + 1))
        staged = staged_of(data)
        v = version(key, "put", len(data), etag=f'"{staged.md5_hex()}"')
        journal.commit(v, staged)
        say("COMMITTED", v.bucket, key, v.seq, hashlib.md5(data).hexdigest())
    elif action < 0.7:
        v = version(key, "delete", 0)
        journal.commit(v)
        say("COMMITTED", v.bucket, key, v.seq, "-")
    elif action < 0.85:
        upload_id = uuid.uuid4().hex
        journal.create_upload(upload_id, "b", key, {}, "t", 0.0)
        pieces = [rng.randbytes(rng.randrange(100 * 1024)) for _ in range(rng.randrange(1, 4))]
        for number, data in enumerate(pieces, 1):
            journal.commit_part(upload_id, number, staged_of(data))
        staged = journal.assemble(upload_id, list(range(1, len(pieces) + 1)))
        whole = b"".join(pieces)
        v = version(key, "put", len(whole), part_sizes=tuple(map(len, pieces)))
        journal.commit(v, staged)
        journal.drop_upload(upload_id)
        say("COMMITTED", v.bucket, key, v.seq, hashlib.md5(whole).hexdigest())
    else:
        upto = journal.last_seq("b", key) - rng.randrange(2)
        say("REMOVING", "b", key, upto)
        journal.remove("b", key, upto)
        say("REMOVED", "b", key, upto)
"""


def run_and_kill(directory: Path, seed: int, delay: float) -> list[list[str]]:
    """Start the child, SIGKILL it ``delay`` seconds after it is ready; the lines it printed."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(directory), str(seed)], stdout=subprocess.PIPE, env=env
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == b"ready\n"
        time.sleep(delay)
    finally:
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
        output = child.stdout.read()
        child.stdout.close()
    lines = output.decode().split("\n")[:-1]  # a line cut by the kill has no newline: dropped
    return [line.split() for line in lines]


# (key, seq) -> (md5 or "-" for a delete, certain): certain, it must be there; not certain, a
# remove that began but did not return covered it, so it may be gone (if there, whole).
Expected = dict[tuple[str, int], tuple[str, bool]]


def replay(expected: Expected, lines: list[list[str]]) -> None:
    """Fold the child's lines, in the order it printed them, into ``expected``."""
    for word, _bucket, key, number, *md5 in lines:
        seq = int(number)
        if word == "COMMITTED":
            expected[(key, seq)] = (md5[0], True)
            continue
        for known in [k for k in expected if k[0] == key and k[1] <= seq]:
            if word == "REMOVING":
                expected[known] = (expected[known][0], False)
            else:
                del expected[known]


def verify(journal: Journal, expected: Expected) -> None:
    """Every certain version is there and whole; a version a cut remove left is whole too, and
    becomes certain (one it took is forgotten)."""
    for (key, seq), (md5, certain) in list(expected.items()):
        version = next((v for v in journal.versions("b", key) if v.seq == seq), None)
        if version is None:
            assert not certain, f"committed {key} seq {seq} is lost"
            del expected[(key, seq)]
            continue
        expected[(key, seq)] = (md5, True)
        if md5 == "-":
            assert version.kind == "delete"
            continue
        with os.fdopen(journal.open_body(version), "rb") as f:
            data = f.read()
        assert hashlib.md5(data).hexdigest() == md5 and len(data) == version.size, f"{key} seq {seq} is torn"


def test_a_journal_writer_killed_at_random_moments_loses_no_commit(tmp_path: Path) -> None:
    rng = random.Random(14)
    expected: Expected = {}
    committed = 0
    for trial in range(TRIALS):
        lines = run_and_kill(tmp_path, rng.randrange(2**32), rng.uniform(0.0, 0.3))
        committed += sum(line[0] == "COMMITTED" for line in lines)
        replay(expected, lines)
        with closing(Journal(tmp_path)) as journal:
            journal.recover()
            assert journal.check() == [], f"trial {trial}"
            assert os.listdir(journal.tmp) == []
            verify(journal, expected)
    assert committed > TRIALS  # the kills landed after real work, not only at start-up


_WORKER = """
import sys
from cachetier.write.journal import Journal, Version

worker, count = sys.argv[2], int(sys.argv[3])
with Journal(sys.argv[1]) as journal:
    for seq in range(1, count + 1):
        for key in (f"own-{worker}", "shared"):
            staged = journal.stage()
            staged.write(f"{worker} {seq}".encode())
            seq_of = seq * 10 + int(worker) if key == "shared" else seq
            journal.commit(Version("b", key, seq_of, "put", size=staged.size, position=0), staged)
        journal.remove("b", f"own-{worker}", seq - 1)
"""


def test_worker_processes_share_one_journal(tmp_path: Path) -> None:
    workers, count = 4, 25
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    children = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(tmp_path), str(i), str(count)], env=env)
        for i in range(workers)
    ]
    assert [child.wait(timeout=60) for child in children] == [0] * workers
    with closing(Journal(tmp_path)) as journal:
        assert journal.check() == []
        shared = journal.versions("b", "shared")
        assert [v.seq for v in shared] == sorted(s * 10 + w for s in range(1, count + 1) for w in range(workers))
        for i in range(workers):
            (last,) = journal.versions("b", f"own-{i}")
            with os.fdopen(journal.open_body(last), "rb") as f:
                assert (last.seq, f.read()) == (count, f"{i} {count}".encode())
