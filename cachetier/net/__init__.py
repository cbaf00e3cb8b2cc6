"""The lean HTTP/1.1 transport (httptools on an asyncio Protocol, a keep-alive pool, flow control)
that carries lake and peer requests. Knows nothing of S3 or blocks; imports nothing of lakegate."""
