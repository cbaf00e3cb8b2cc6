"""Process-wide tuning the gateway needs wherever it runs (``lakegate serve``, uvicorn's own
CLI on the app, tests): applied once when the app is built."""

from __future__ import annotations

import ctypes
import functools
import resource

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def tune_malloc() -> bool:
    """Keep glibc from trimming and regrowing the heap around every 64 KiB-1 MiB body buffer
    (page faults on each chunk; measured 2.64 -> 1.84 CPU-s/GiB on 64 MiB GETs). True when
    applied; False off glibc. Idempotent: the first call does it, later calls only answer."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False  # not glibc
    # above the block size (a 4 MiB block as a bytes object is a little over 4 MiB): blocks
    # come from the heap, not a fresh mmap + page faults + munmap each (measured 1.21 -> 0.82
    # CPU-s/GiB on hot 64 MiB reads); 32 MiB is glibc's largest threshold
    applied = libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20) == 1
    return bool(libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20) == 1 and applied)


def raise_open_files_limit() -> int:
    """Raises this process's soft limit on open files to its hard limit (a common default soft
    limit, 1024, is below LAKEGATE_MAX_CONNECTIONS' default with the cache's and the lake's own
    files); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass  # kept as it was; the caller warns if it is too low
    return soft
