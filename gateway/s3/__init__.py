"""The S3 protocol: request parsing into typed commands, SigV4, aws-chunked bodies, XML
responses and the error hierarchy. Knows nothing of caching; it calls the data plane.
"""
