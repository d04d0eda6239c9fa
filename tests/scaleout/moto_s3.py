"""An S3 endpoint on 127.0.0.1 for the object-storage tests: moto's server (`moto[server]` from
PyPI), started in a process group of its own and stopped by killing it.

    with MotoS3(log_dir) as s3:
        s3.env         # the standard AWS environment that deltalake and pyarrow read
        s3.bucket("warehouse")
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MotoS3:
    def __init__(self, log_dir: str):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = os.path.join(log_dir, "moto.log")
        self.proc: subprocess.Popen | None = None
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self) -> "MotoS3":
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto did not start; see {self.log}") from None
                time.sleep(0.2)

    def bucket(self, name: str) -> str:
        """Create bucket `name`; returns s3://name."""
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=name)
        return f"s3://{name}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> "MotoS3":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
