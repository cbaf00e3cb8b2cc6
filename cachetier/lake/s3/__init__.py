"""S3Lake: the Lake over any S3 endpoint (Ceph RGW, MinIO, AWS): the client, request signing,
header mapping and the XML of S3's answers. May import ``cachetier.lake``, ``cachetier.net`` and
``cachetier.errors``."""
