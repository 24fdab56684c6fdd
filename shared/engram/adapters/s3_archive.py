"""Archive of expired telemetry on S3-compatible object storage (boto3; R-11.1).

boto3 because it is the reference S3 client, speaks to every S3-compatible store through
`endpoint_url`, and is what moto's server (the tests' stand-in) is built to answer. Its calls
block, so the async callers run them in a worker thread.
"""

from __future__ import annotations

import base64
import hashlib
from typing import IO, Any

from engram.domain.errors import ArchiveError


class S3Archive:
    def __init__(self, bucket: str, *, endpoint_url: str | None = None, region: str | None = None) -> None:
        import boto3  # here, not at import: memory-api imports ArchiveError and must start fast
        from botocore.config import Config

        self.bucket = bucket
        self._client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=60),
        )

    def put(self, key: str, body: IO[bytes], *, size: int, content_md5: bytes, metadata: dict[str, str]) -> None:
        """Store `body` under `key`; S3 checks the MD5, and a HEAD confirms the size, or ArchiveError."""
        try:
            self._client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                ContentLength=size,
                ContentMD5=base64.b64encode(content_md5).decode(),
                ContentType="application/x-ndjson",
                ContentEncoding="gzip",
                Metadata=metadata,
            )
            head = self._client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:  # botocore raises many types; all mean "not archived"
            raise ArchiveError(f"archiving s3://{self.bucket}/{key} failed: {exc}") from exc
        if int(head.get("ContentLength", -1)) != size:
            raise ArchiveError(f"s3://{self.bucket}/{key} holds {head.get('ContentLength')} bytes, expected {size}")

    def get(self, key: str) -> bytes:
        data: bytes = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return data

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as exc:  # botocore raises many types
            raise ArchiveError(f"deleting s3://{self.bucket}/{key} failed: {exc}") from exc

    def keys(self, prefix: str = "") -> list[str]:
        found: list[str] = []
        for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            found.extend(item["Key"] for item in page.get("Contents", []))
        return found


def md5_of(data: bytes) -> bytes:
    return hashlib.md5(data, usedforsecurity=False).digest()
