"""One module per S3 resource (as Swift's s3api controllers): service, bucket, object,
multipart. ``HANDLERS`` maps an operation name to its coroutine."""

from __future__ import annotations

from gateway.s3.handlers import bucket, multipart, obj, service
from gateway.s3.handlers.common import Handler

HANDLERS: dict[str, Handler] = {
    "ListBuckets": service.list_buckets,
    "CreateBucket": bucket.create_bucket,
    "HeadBucket": bucket.head_bucket,
    "DeleteBucket": bucket.delete_bucket,
    "GetBucketLocation": bucket.get_bucket_location,
    "ListObjects": bucket.list_objects,
    "ListObjectsV2": bucket.list_objects,
    "DeleteObjects": bucket.delete_objects,
    "HeadObject": obj.head_object,
    "GetObject": obj.get_object,
    "PutObject": obj.put_object,
    "CopyObject": obj.copy_object,
    "DeleteObject": obj.delete_object,
    "CreateMultipartUpload": multipart.create,
    "UploadPart": multipart.upload_part,
    "UploadPartCopy": multipart.upload_part_copy,
    "CompleteMultipartUpload": multipart.complete,
    "AbortMultipartUpload": multipart.abort,
    "ListParts": multipart.list_parts,
    "ListMultipartUploads": multipart.list_uploads,
}
