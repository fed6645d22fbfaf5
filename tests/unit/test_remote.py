"""evalcore.remote without a store: which URLs are taken, how they are spelled, what is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalcore import remote
from evalcore.errors import EvalInputError
from evalcore.outputs import check_not_inputs


@pytest.mark.parametrize("text, expected", [
    ("s3://bucket/a/b.parquet", True), ("gs://b/x", True), ("az://c/x", True), ("file:///tmp/x", True),
    ("/data/x.parquet", False), ("x.parquet", False), ("C:/data/x.gpkg", False), ("s3:/bucket/x", False),
])
def test_is_url(text: str, expected: bool) -> None:
    assert remote.is_url(text) is expected


@pytest.mark.parametrize("url, expected", [
    ("s3a://bucket//runs/a/", "s3://bucket/runs/a"),
    ("S3://bucket/x.json", "s3://bucket/x.json"),
    ("gcs://bucket/x.gpkg", "gs://bucket/x.gpkg"),
    ("abfs://container/dir/x.parquet", "az://container/dir/x.parquet"),
    ("abfss://container/x.parquet", "az://container/x.parquet"),
    ("file:///data/layers/x.gpkg", "/data/layers/x.gpkg"),
])
def test_one_spelling_per_object(url: str, expected: str) -> None:
    assert remote.check_url(url, "-p") == expected


@pytest.mark.parametrize("url, secret, reason", [
    ("s3://AKIAEXAMPLE:verysecret123@bucket/x.parquet", "verysecret123", "credentials before '@'"),
    ("s3://bucket/x.parquet?X-Amz-Algorithm=AWS4&X-Amz-Signature=deadbeef99", "deadbeef99", "X-Amz-Signature"),
    ("gs://bucket/x.parquet?X-Goog-Signature=cafe0042", "cafe0042", "X-Goog-Signature"),
    ("az://container/x.parquet?sv=2024-01-01&sig=abcSAS77", "abcSAS77", "token"),
    ("az://account:accountkey88@container/x.parquet", "accountkey88", "account key"),
])
def test_a_url_with_a_credential_is_refused_without_repeating_it(url: str, secret: str, reason: str) -> None:
    with pytest.raises(EvalInputError) as found:
        remote.check_url(url, "-p/--predicted")
    message = str(found.value)
    assert "-p/--predicted" in message and reason in message and secret not in message


@pytest.mark.parametrize("url", ["http://example.com/x.parquet", "ftp://host/x.gpkg", "hdfs://nn/x.parquet"])
def test_other_schemes_are_refused_naming_the_ones_taken(url: str) -> None:
    with pytest.raises(EvalInputError, match="s3://, gs://, az://"):
        remote.check_url(url, "-r")


def test_the_endpoint_of_an_s3_compatible_store_is_given_to_gdal() -> None:
    assert remote._gdal_endpoint_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}) == {
        "AWS_S3_ENDPOINT": "127.0.0.1:9000", "AWS_HTTPS": "NO", "AWS_VIRTUAL_HOSTING": "FALSE"}
    assert remote._gdal_endpoint_options({"AWS_ENDPOINT_URL": "https://minio.example.org"})["AWS_HTTPS"] == "YES"
    assert remote._gdal_endpoint_options({}) == {}


def test_gdal_paths_of_each_store() -> None:
    assert remote.gdal_path("s3://bucket/dir/x.gpkg") == "/vsis3/bucket/dir/x.gpkg"
    assert remote.gdal_path("gs://bucket/x.fgb") == "/vsigs/bucket/x.fgb"
    assert remote.gdal_path("az://container/x.gpkg") == "/vsiaz/container/x.gpkg"
    assert remote.gdal_path("/local/x.gpkg") == "/local/x.gpkg"


def test_scrub_hides_the_environment_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-XYZ")
    assert remote.scrub("signature for s3cr3t-value-XYZ failed") == "signature for *** failed"


def test_store_errors_are_one_line_naming_the_url_and_the_way_out() -> None:
    missing = remote.store_error("s3://b/k.parquet", FileNotFoundError("b/k.parquet"), "reference file")
    assert str(missing) == "reference file 's3://b/k.parquet' does not exist; check the URL."
    denied = remote.store_error("s3://b/k.parquet", PermissionError("Forbidden"))
    assert "access denied" in str(denied) and "\n" not in str(denied)
    library = remote.store_error("gs://b/k.parquet", ImportError("No module named 'gcsfs'"))
    assert "evalcore[gcs]" in str(library)


def test_an_output_equal_to_an_input_by_normalised_url_is_refused() -> None:
    with pytest.raises(EvalInputError, match="input layer of -p"):
        check_not_inputs({"-p": "s3://bucket/in/p.parquet"}, {"-o": "s3a://bucket//in/p.parquet/"}, set())
    with pytest.raises(EvalInputError, match="also -o"):
        check_not_inputs({}, {"-o": "s3://b/m.json", "--frame-out": "s3://b//m.json"}, set())
    check_not_inputs({"-p": "s3://bucket/in/p.parquet"}, {"-o": "/tmp/in/p.parquet"}, set())  # a URL never equals a local path


def test_join_parent_and_name() -> None:
    assert remote.join("s3://b/runs/", "a", "/metrics.json") == "s3://b/runs/a/metrics.json"
    assert remote.parent("s3://b/runs/a/metrics.json") == "s3://b/runs/a"
    assert remote.name("s3://b/runs/a/metrics.json") == "metrics.json"


_SEGMENT = st.text(alphabet="abcz019-_.", min_size=1, max_size=6)


@given(st.sampled_from(["s3", "s3a", "S3", "gs", "gcs", "az", "abfs", "abfss"]), _SEGMENT,
       st.lists(_SEGMENT, max_size=4), st.lists(st.sampled_from(["/", "//", "///"]), min_size=5, max_size=5), st.booleans())
def test_normalise_is_idempotent_and_ignores_repeated_slashes(scheme: str, bucket: str, keys: list[str], seps: list[str], trailing: bool) -> None:
    url = f"{scheme}://{bucket}" + "".join(sep + key for sep, key in zip(seps, keys)) + ("/" if trailing else "")
    once = remote.normalise(url)
    assert remote.normalise(once) == once
    assert once == remote.normalise(f"{scheme}://{bucket}" + "".join("/" + key for key in keys))
    assert "//" not in once.partition("://")[2] and not once.endswith("/")


def test_a_file_hashed_before_and_unchanged_is_not_read_again(tmp_path, monkeypatch):
    import builtins
    import hashlib
    import os

    from evalcore import remote

    path = tmp_path / "layer.parquet"
    opened = []
    real_open = builtins.open

    def counting_open(*args, **kwargs):
        if str(args[0]) == str(path):  # other threads of the test process open files too
            opened.append(args[0])
        return real_open(*args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    path.write_bytes(b"x" * 3_000_000)
    x = hashlib.sha256(b"x" * 3_000_000).hexdigest()
    # Changed within the settling time (a year here, so that no pause of the machine can
    # make the file look settled): hashed each time, as a rewrite in the same clock tick
    # would keep its times.
    monkeypatch.setattr(remote, "_SETTLED_NS", 365 * 86_400 * 10**9)
    assert remote.file_sha256(path) == x and remote.file_sha256(path) == x and opened == [path, path]
    # Settled (a settling time of nothing): read once, then from memory.
    monkeypatch.setattr(remote, "_SETTLED_NS", -1)
    assert remote.file_sha256(path) == x and len(opened) == 3
    assert remote.file_sha256(path) == x and len(opened) == 3
    # The same size written again, its modification time put back as it was: its change
    # time moved, so it is read again.
    stat = os.stat(path)
    path.write_bytes(b"y" * 3_000_000)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == stat.st_mtime_ns and os.stat(path).st_size == stat.st_size
    assert remote.file_sha256(path) == hashlib.sha256(b"y" * 3_000_000).hexdigest() and len(opened) == 4
