"""A real S3-compatible server on 127.0.0.1 for the object-storage tests (moto's server mode).

The server runs in a thread of the test process and checks every request's signature
against its own IAM: the tests get an access key of a user allowed ``s3:*``, and a
wrong key or secret is refused as a real store refuses it. The evalcore subprocesses
find the store through the standard variables only (:func:`S3Store.env`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest

from tests.dask_processes import free_port

BUCKET = "evalcore-data"


@dataclass(frozen=True)
class S3Store:
    endpoint: str
    key_id: str
    secret: str
    bucket: str
    reader_key_id: str = ""
    reader_secret: str = ""
    """A second user, allowed only to read (``s3:GetObject``, ``s3:ListBucket``)."""

    def env(self, **changes: str) -> dict[str, str]:
        """The environment of an evalcore subprocess that uses the store (nothing but the standard variables)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ENDPOINT_URL=self.endpoint, AWS_ACCESS_KEY_ID=self.key_id, AWS_SECRET_ACCESS_KEY=self.secret,
                   AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true", PREFECT_SERVER_ANALYTICS_ENABLED="false")
        env.update(changes)
        return env

    def fs(self) -> object:
        """An s3fs file system of the test process itself (its own credentials, never the environment's)."""
        import s3fs

        return s3fs.S3FileSystem(key=self.key_id, secret=self.secret, endpoint_url=self.endpoint, skip_instance_cache=True,
                                 client_kwargs={"region_name": "us-east-1"})

    def url(self, *names: str) -> str:
        return "s3://" + "/".join([self.bucket, *names])

    def listing(self) -> list[str]:
        """Every object of the bucket (to check that nothing was left behind)."""
        return sorted(self.fs().find(self.bucket))


@pytest.fixture(scope="session")
def s3_store() -> S3Store:
    """The server, a bucket and the key of a user allowed ``s3:*``; requests are authenticated."""
    pytest.importorskip("moto.server")
    import boto3
    import moto.settings
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    admin = {"endpoint_url": endpoint, "aws_access_key_id": "admin", "aws_secret_access_key": "admin", "region_name": "us-east-1"}
    iam = boto3.client("iam", **admin)
    iam.create_user(UserName="evalcore")
    key = iam.create_access_key(UserName="evalcore")["AccessKey"]
    policy = iam.create_policy(PolicyName="s3-all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    iam.attach_user_policy(UserName="evalcore", PolicyArn=policy["Policy"]["Arn"])
    iam.create_user(UserName="reader")
    reader = iam.create_access_key(UserName="reader")["AccessKey"]
    read_only = iam.create_policy(PolicyName="s3-read", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": "*"}]}))
    iam.attach_user_policy(UserName="reader", PolicyArn=read_only["Policy"]["Arn"])
    boto3.client("s3", **admin).create_bucket(Bucket=BUCKET)
    before = moto.settings.INITIAL_NO_AUTH_ACTION_COUNT
    moto.settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # from now on every request must be signed by a known key
    try:
        yield S3Store(endpoint, key["AccessKeyId"], key["SecretAccessKey"], BUCKET, reader["AccessKeyId"], reader["SecretAccessKey"])
    finally:
        moto.settings.INITIAL_NO_AUTH_ACTION_COUNT = before
        server.stop()
