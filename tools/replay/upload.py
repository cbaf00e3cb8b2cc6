"""Store a synthetic data set in a lake (``lakegate trace synth --upload``).

Each object's bytes are a function of its bucket and key (seeded pseudo-random bytes, so
a cache or a compression step cannot shortcut them), so a data set can be uploaded again,
or checked, without keeping a copy. An object already there with the right size is kept:
an interrupted upload resumes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tools.replay.credentials import Credentials, s3_client
from tools.replay.synth import DataObject

UPLOAD_THREADS = 8


class UploadError(RuntimeError):
    """The lake refused or could not be reached; the message names the object."""


def object_bytes(bucket: str, key: str, size: int) -> bytes:
    """The deterministic content of one synthetic object (str seeds hash with SHA-512:
    the same bytes on every run and machine)."""
    return random.Random(f"{bucket}/{key}").randbytes(size)


def upload(objects: Sequence[DataObject], endpoint: str, credentials: Credentials, region: str,
           ca_bundle: str | None = None, done: Callable[[DataObject, bool], None] | None = None) -> int:
    """Create the buckets and put every object (``done(obj, uploaded)`` after each);
    returns the bytes uploaded."""
    clients = {t: s3_client(endpoint, credentials.keys_for(t), region, ca_bundle)
               for t in sorted({o.tenant for o in objects})}
    for bucket, tenant in sorted({(o.bucket, o.tenant) for o in objects}):
        _create_bucket(clients[tenant], bucket)

    def put(obj: DataObject) -> int:
        uploaded = _put_if_missing(clients[obj.tenant], obj)
        if done is not None:
            done(obj, uploaded)
        return obj.size if uploaded else 0

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:  # botocore clients are thread-safe
        return sum(pool.map(put, objects))


def _create_bucket(client: Any, bucket: str) -> None:
    try:
        client.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
            raise UploadError(f"create bucket {bucket}: {exc}") from exc
    except BotoCoreError as exc:
        raise UploadError(f"create bucket {bucket}: {exc}") from exc


def _put_if_missing(client: Any, obj: DataObject) -> bool:
    where = f"{obj.bucket}/{obj.key}"
    try:
        if _stored_size(client, obj) == obj.size:
            return False
        client.put_object(Bucket=obj.bucket, Key=obj.key, Body=object_bytes(obj.bucket, obj.key, obj.size))
        return True
    except (ClientError, BotoCoreError) as exc:
        raise UploadError(f"upload {where}: {exc}") from exc


def _stored_size(client: Any, obj: DataObject) -> int | None:
    try:
        return int(client.head_object(Bucket=obj.bucket, Key=obj.key)["ContentLength"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
