"""Where a store answers: :class:`Endpoint` (an S3 URL, its latency proxy and credentials),
:class:`StoreError` with :func:`explain`/:func:`error_of`, and :func:`port_open`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MiB = 2**20


class StoreError(RuntimeError):
    """The object store could not be started or used; the message names the fix."""


@dataclass(frozen=True)
class Endpoint:
    """Where a client connects (a URL on 127.0.0.1), with the credentials to sign requests.
    ``latency_s`` and ``bandwidth`` are what the proxy at this URL adds (0 and None: the
    server itself). Small and picklable: datasets carry it into their workers."""

    url: str
    access_key: str
    secret_key: str
    latency_s: float = 0.0
    bandwidth: float | None = None  #: bytes/s per connection, None = uncapped
    region: str = "us-east-1"
    concurrency: int | None = None  #: requests the store serves at once, None = no limit

    def client(self, max_connections: int = 10):
        """A boto3 S3 client for this endpoint (one attempt per request: a failure shows at once)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(
                max_pool_connections=max(10, max_connections),
                connect_timeout=3,
                read_timeout=60,
                retries={"max_attempts": 1, "mode": "standard"},
            ),
        )

    def describe(self) -> str:
        extra = (
            "none added"
            if not self.latency_s and not self.bandwidth
            else (
                f"{self.latency_s * 1e3:.0f} ms round trip added"
                + (f", {self.bandwidth / 1e6:.0f} MB/s per connection" if self.bandwidth else "")
            )
        ) + (f", at most {self.concurrency} requests served at once" if self.concurrency else "")
        return f"{self.url} ({extra})"


def explain(error: BaseException, endpoint: Endpoint, bucket: str | None = None) -> Exception:
    """The clear error for what the client raised: what went wrong and the fix."""
    from botocore.exceptions import ClientError, EndpointConnectionError

    if isinstance(error, EndpointConnectionError | ConnectionRefusedError):
        return ConnectionError(
            f"no object store answers at {endpoint.url}: it is not running (or stopped). Start one with "
            "`store = helpers.ObjectStore().start()` and use `store.endpoint(...)`, or check the port."
        )
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        if code in ("NoSuchBucket", "404", "NotFound"):
            return LookupError(
                f"the object store at {endpoint.url} has no bucket {bucket!r}: create it with "
                f"`store.make_bucket({bucket!r}, ...)`, or check the bucket's name."
            )
        if code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "403"):
            return PermissionError(
                f"the object store at {endpoint.url} refused the credentials ({code}): use the access key "
                "and secret of `store.endpoint(...)` (helpers.ObjectStore creates them when it starts)."
            )
    return error if isinstance(error, Exception) else RuntimeError(str(error))


def check_bucket(endpoint: Endpoint, bucket: str) -> None:
    """Raise the clear error (:func:`explain`) unless ``bucket`` can be read at ``endpoint``."""
    if not isinstance(endpoint, Endpoint):
        raise TypeError(
            f"endpoint must be a helpers.Endpoint (from store.endpoint()), got {type(endpoint).__name__}"
        )
    try:
        endpoint.client().head_bucket(Bucket=bucket)
    except Exception as error:  # noqa: BLE001 - translated, then raised
        raise explain(error, endpoint, bucket) from None


def error_of(attempt: Any) -> Exception:
    """Call ``attempt()`` and return the exception it raised; raise AssertionError if it
    raised none (a demonstration of an error that did not happen must not pass silently)."""
    try:
        attempt()
    except Exception as error:  # noqa: BLE001 - returned to be shown
        return error
    raise AssertionError(f"{attempt!r} raised no error")


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
