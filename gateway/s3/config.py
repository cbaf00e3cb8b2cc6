"""``FrontendConfig``: how the S3 front end reads requests (virtual hosts, anonymous buckets,
clock skew, header size, SigV2) and whether it logs them; the one place these defaults live (the
gateway's settings take theirs from here)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta


@dataclasses.dataclass(frozen=True)
class FrontendConfig:
    host_suffixes: tuple[str, ...] = ("localhost",)  # bucket.SUFFIX is a virtual-host-style request
    anonymous_buckets: frozenset[str] = frozenset()  # unsigned requests may read these
    max_skew: timedelta = timedelta(seconds=900)  # between a signed request's time and this clock
    max_header_bytes: int = 16384  # larger: 400 RequestHeaderSectionTooLarge
    access_log: bool = True  # one line per request
    sigv2: bool = True  # verify SigV2 (header and presigned URLs); off: 400 InvalidRequest, as AWS
    body_timeout: float = 60.0  # seconds without a request body byte: 400 RequestTimeout
