"""Crash tests: a child python runs a store's own code and is SIGKILLed mid-write, and what it
left must be whole. The disk block store (a writer killed mid-put leaves no wrong block; reads
flushed in the background survive the kill) and DirLake (a writer killed mid-overwrite leaves
whole objects). Component tests for their child process; the stores' other tests are in
tests/unit/test_blockstore.py and tests/unit/test_dirlake.py, the helpers in tests/doubles.py.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path

import pytest
from doubles import B, MiB, bid, block, content, fits, leftovers, md5_etag, read

from cachetier.blocks.files import BlockFiles
from cachetier.blocks.store import DiskBlockStore
from cachetier.lake import ListQuery
from cachetier.lake.dirlake import DirLake

REPO = Path(__file__).resolve().parents[2]


def run_on(lake: DirLake, scenario: Callable[[DirLake], Awaitable[None]]) -> None:
    """Run ``scenario(lake)``, then close the lake."""

    async def main() -> None:
        try:
            await scenario(lake)
        finally:
            await lake.aclose()

    asyncio.run(main())


# ---- the disk block store ------------------------------------------------------------------------


_WRITER_IMPORTS = """
import random, sys
from cachetier.blocks.ids import BlockId
from cachetier.blocks.store import DiskBlockStore
"""
_WRITER = """
store = DiskBlockStore(sys.argv[1], int(sys.argv[2]))
ids = [BlockId.of("bucket", "k", '"etag"', i) for i in range(int(sys.argv[3]))]
rng = random.Random()
for n in range(10**9):
    block_id = rng.choice(ids)
    store.put(block_id, content(block_id))
    store.get(rng.choice(ids))
    if n == 0:
        print("writing", flush=True)  # at least one block is in
"""


def test_a_writer_killed_mid_put_leaves_no_wrong_block(tmp_path: Path) -> None:
    # ~40 blocks of up to 64 KiB in 1 MiB of block space: puts, replacements and evictions
    # all run when the kill lands.
    script = _WRITER_IMPORTS + textwrap.dedent(inspect.getsource(content)) + _WRITER
    capacity, count = MiB, 40
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random()
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path), str(capacity), str(count)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        try:
            assert child.stdout.readline() == b"writing\n"
            try:
                child.wait(timeout=rng.uniform(0.02, 0.3))
            except subprocess.TimeoutExpired:
                pass
        finally:
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
            child.stdout.close()
    with closing(DiskBlockStore(tmp_path, capacity)) as store:
        # a SIGKILL leaves at most a put's tmp/ file, which opening the store removed: nothing
        # torn, nothing stray, nothing over capacity
        assert BlockFiles(tmp_path).tmp_files() == []
        assert store.check() == []
        assert sum(size for _, size, _ in store.files.scan()) <= capacity
        ids = [bid(i) for i in range(count)]
        assert any(i in store for i in ids)
        assert all(store.get(i) in (None, content(i)) for i in ids)
        assert store.corrupt == 0  # a SIGKILL never tears a block: the checksum is the backstop


_READER = """
store = DiskBlockStore(sys.argv[1], int(sys.argv[2]), sys.argv[3], flush_interval=0.02)
ids = [BlockId.of("bucket", "k", '"etag"', i) for i in range(3)]
for block_id in ids:
    store.put(block_id, content(block_id, 1024 * 1024))
assert store.get(ids[0]) is not None and store.get(ids[1]) is not None
print("read", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_reads_are_flushed_in_the_background_and_survive_a_kill(tmp_path: Path, eviction: str) -> None:
    script = _WRITER_IMPORTS + "import time\n" + textwrap.dedent(inspect.getsource(content)) + _READER
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path), str(fits(3)), eviction], stdout=subprocess.PIPE, env=env
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == b"read\n"
        deadline = time.monotonic() + 30
        files = BlockFiles(tmp_path)
        last_use = [lambda i=i: os.stat(files.path(bid(i).hex)).st_atime for i in range(3)]
        while not last_use[0]() > last_use[2]() < last_use[1]():  # 2 was put last, 0 and 1 read since
            assert time.monotonic() < deadline, "the reads were not flushed"
            time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
        child.stdout.close()
    with closing(DiskBlockStore(tmp_path, fits(3), eviction)) as store:
        store.put(*block(3))
        assert [i for i in range(4) if bid(i) in store] == [0, 1, 3]


# ---- DirLake -------------------------------------------------------------------------------------


_LAKE_WRITER = """
import asyncio, sys
from cachetier.lake.dirlake import DirLake
from cachetier.lake import ObjectAttributes

async def main():
    lake = DirLake(sys.argv[1])
    await lake.create_bucket("bkt")
    for i in range(10**6):
        data = str(i).encode() * 1_000_000
        async def body():
            yield data
        await lake.put_object("bkt", f"k{i % 3}", body(), len(data), ObjectAttributes())
        print(i, flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.02])
def test_killed_writer_leaves_whole_objects(tmp_path: Path, delay: float) -> None:
    """SIGKILL a process overwriting objects: the delays land the kill in various write steps."""
    root = tmp_path / "lake"
    child = subprocess.Popen(
        [sys.executable, "-c", _LAKE_WRITER, str(root)], stdout=subprocess.PIPE, cwd=REPO
    )
    assert child.stdout is not None
    for _ in range(5):  # several overwrites in
        child.stdout.readline()
    time.sleep(delay)
    child.kill()
    child.wait()
    child.stdout.close()
    lake = DirLake(root, stale_after=0)
    assert lake.check() == [] and leftovers(root) == []

    async def scenario(lake: DirLake) -> None:
        entries = (await lake.list_objects(B, ListQuery())).entries
        assert len(entries) == 3
        for entry in entries:
            assert md5_etag((await read(lake, entry.key))[1]) == entry.etag
        assert len(list((root / B / "data").glob("*/*"))) == 3  # unnamed files were removed

    run_on(DirLake(root), scenario)
