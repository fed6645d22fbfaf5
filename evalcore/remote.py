"""Object storage: the one home of URL handling (parse, normalise, refuse, open, hash, put).

Input layers and ``evaluate``'s outputs may be fsspec URLs as well as local paths
(SPEC 6.13): ``s3://``, ``gs://``, ``az://`` (or ``abfs://``) and ``file://``. Every
other module asks this one whether a path is a URL (:func:`is_url`), checks and
normalises it (:func:`check_url`, :func:`normalise`), opens it (:func:`parquet_file`,
:func:`gdal_path`, :func:`open_input`), hashes it (:func:`object_facts`) and writes to
it (:func:`put_file`, :func:`check_writable`).

Credentials come only from each store's standard configuration: environment variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``AWS_ENDPOINT_URL``,
``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_*``), config files and instance or
workload identities. A URL that carries a key, a secret or a signature is refused,
with a message that says why but does not repeat it. Errors name the URL (never a
secret) in one line: no access, no such bucket or object, an endpoint that cannot be
reached, a missing store library.

GeoParquet is read through pyarrow over the fsspec file system, so a reader fetches
only the footer and the row groups it needs (ranged reads). Other formats go through
GDAL's virtual file systems (``/vsis3/``, ``/vsigs/``, ``/vsiaz/``); an
``AWS_ENDPOINT_URL`` (an S3-compatible store, a local server) is passed to GDAL as its
``AWS_S3_ENDPOINT``, ``AWS_HTTPS`` and ``AWS_VIRTUAL_HOSTING`` options.

An output is written locally first and sent in one put (s3fs sends one PUT, or a
multipart upload completed only when every part arrived), so an object is never seen
half-written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from evalcore.errors import EvalInputError

__all__ = [
    "SCHEMES",
    "file_sha256",
    "is_url",
    "check_url",
    "normalise",
    "check_input_urls",
    "check_local_only",
    "join",
    "parent",
    "name",
    "filesystem",
    "stat",
    "parquet_parts",
    "list_files",
    "open_input",
    "parquet_file",
    "gdal_path",
    "object_facts",
    "put_file",
    "remove",
    "check_writable",
    "run_directory",
    "store_error",
    "scrub",
]

#: URL schemes evalcore reads and writes, by the name fsspec knows them under.
SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az", "abfss": "az", "file": "file"}

#: The package each store needs, and the extra that installs it.
_LIBRARIES = {"s3": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "az": ("adlfs", "azure")}

#: GDAL's virtual file system of each store.
_GDAL_PREFIX = {"s3": "/vsis3/", "gs": "/vsigs/", "az": "/vsiaz/"}

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

# Query parameters that carry a credential: S3 presigned URLs, GCS signed URLs, Azure SAS tokens.
_SECRET_QUERY = re.compile(r"(?i)^(x-amz-(credential|signature|security-token)|awsaccesskeyid|signature|x-goog-(credential|signature)"
                           r"|sig|sv|se|sp|sas|access_?key|secret(_?access_?key)?|token|session_?token|password|key)$")

# Environment variables whose values are secrets: scrubbed from every message that leaves here.
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY",
               "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET", "GOOGLE_OAUTH_ACCESS_TOKEN")


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path.

    Examples
    --------
    >>> is_url("s3://bucket/fields.parquet"), is_url("/data/fields.parquet"), is_url("C:/data")
    (True, False, False)
    """
    return isinstance(path, str) and _URL.match(path) is not None


def _scheme(url: str) -> str:
    match = _URL.match(url)
    return match.group(1).lower() if match else ""


def check_url(url: str, option: str = "path") -> str:
    """Refuse a URL evalcore cannot use, or that carries a credential; return it normalised.

    Raises
    ------
    EvalInputError
        Naming ``option`` and the URL (without its credential): an unknown scheme, a
        user or password before the host, a signed or SAS query string.
    """
    scheme = _scheme(url)
    if scheme not in SCHEMES:
        raise EvalInputError(
            f"{option} {_shown(url)!r}: evalcore reads and writes local paths and s3://, gs://, az:// (abfs://) and file:// URLs, "
            f"not {scheme}://."
        )
    parts = urlsplit(url)
    if "@" in parts.netloc and SCHEMES[scheme] != "az":
        raise EvalInputError(
            f"{option} {_shown(url)!r}: the URL carries credentials before '@'; give them through the store's own configuration "
            "(environment variables, config files or an instance identity), never in the URL."
        )
    if SCHEMES[scheme] == "az" and ":" in parts.netloc.partition("@")[0]:
        raise EvalInputError(
            f"{option} {_shown(url)!r}: the URL carries an account key; give it through AZURE_STORAGE_* variables or an identity, "
            "never in the URL."
        )
    secret = [key for key, _ in parse_qsl(parts.query, keep_blank_values=True) if _SECRET_QUERY.match(key)]
    if secret:
        raise EvalInputError(
            f"{option} {_shown(url)!r}: the URL is signed or carries a token (query parameter {secret[0]!r}); evalcore takes "
            "credentials only from the store's own configuration (environment variables, config files, identities)."
        )
    return normalise(url)


def _shown(url: str) -> str:
    """A URL as messages show it: without user information or query string (they may hold secrets)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}" + ("?..." if parts.query else "")


def normalise(url: str) -> str:
    """One spelling per object: the canonical scheme, no repeated or trailing slashes; ``file://`` becomes a local path.

    Examples
    --------
    >>> normalise("s3a://bucket//runs/a/")
    's3://bucket/runs/a'
    >>> normalise("abfs://container/x.gpkg")
    'az://container/x.gpkg'
    >>> normalise("file:///data/x.gpkg")
    '/data/x.gpkg'
    """
    if not is_url(url):
        return url
    scheme = SCHEMES.get(_scheme(url), _scheme(url))
    rest = url[_URL.match(url).end():]
    if scheme == "file":
        return os.path.abspath("/" + rest.lstrip("/")) if rest.startswith("/") else os.path.abspath(rest)
    rest = re.sub(r"/{2,}", "/", rest).rstrip("/")
    return f"{scheme}://{rest}"


def join(base: str, *names: str) -> str:
    """``base/name/...`` for a URL (or a local path)."""
    if not is_url(base):
        return os.path.join(base, *names)
    return "/".join([base.rstrip("/"), *(n.strip("/") for n in names)])


def parent(url: str) -> str:
    """The prefix an object is in (``s3://b/x/y.json`` → ``s3://b/x``)."""
    head, _, _ = url.rstrip("/").rpartition("/")
    return head if "://" in head and not head.endswith(":/") else url.rstrip("/")


def name(url: str) -> str:
    """The last part of a URL's key (``s3://b/x/y.json`` → ``y.json``)."""
    return url.rstrip("/").rpartition("/")[2]


def check_input_urls(inputs: dict[str, object]) -> None:
    """Refuse, naming the flag, an input URL evalcore cannot use or that carries a credential (:func:`check_url`)."""
    for option, path in inputs.items():
        if isinstance(path, str) and is_url(path):
            check_url(path, option)


def check_local_only(paths: dict[str, str | None]) -> None:
    """Refuse a store URL where evalcore takes only a local path (so far: the work directory, ``run``'s run directory)."""
    for option, path in paths.items():
        if path is not None and is_url(path) and is_url(normalise(path)):
            check_url(path, option)
            raise EvalInputError(
                f"{option} {path!r}: this must be a local path (or a file system every worker mounts) for now; "
                "the inputs and evaluate's outputs may be URLs (docs/national-run.md)."
            )


# --------------------------------------------------------------------------- errors


def scrub(text: str) -> str:
    """``text`` with the value of every credential variable of the environment replaced by ``***``."""
    for key in _SECRET_ENV:
        value = os.environ.get(key)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def _chain(exc: BaseException) -> list[BaseException]:
    seen, out, current = set(), [], exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def store_error(url: str, exc: BaseException, what: str = "") -> EvalInputError:
    """One line for a failed store operation on ``url``: what went wrong and the way out, never a secret."""
    where = f"{what} {_shown(url)!r}" if what else repr(_shown(url))
    chain = _chain(exc)
    text = " ".join(f"{type(e).__name__} {e}" for e in chain)
    if isinstance(exc, EvalInputError):
        return exc
    if any(isinstance(e, ImportError) for e in chain):
        library, extra = _LIBRARIES.get(SCHEMES.get(_scheme(url), ""), ("its fsspec library", "cloud"))
        return EvalInputError(f"{where}: reading this store needs {library}; install it (pip install 'evalcore[{extra}]').")
    if re.search(r"InvalidAccessKeyId|SignatureDoesNotMatch|InvalidClientTokenId|ExpiredToken|AuthFailure|"
                 r"Unable to locate credentials|NoCredentials|invalid_grant|AuthenticationFailed", text):
        return EvalInputError(
            f"{where}: the store refused the credentials (unknown key, wrong secret or expired token); check the store's "
            "configuration (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*)."
        )
    if re.search(r"NoSuchBucket|bucket does not exist|ContainerNotFound|specified bucket", text):
        bucket = urlsplit(url).netloc
        return EvalInputError(f"{where}: the bucket {bucket!r} does not exist; check the URL (or create the bucket).")
    if any(isinstance(e, PermissionError) for e in chain) or re.search(r"AccessDenied|Forbidden|403", text):
        return EvalInputError(
            f"{where}: access denied; the store refused the request (wrong credentials, or a policy that forbids it): check the "
            "store's configuration (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS, "
            "AZURE_STORAGE_*) and the bucket's policy."
        )
    if any(isinstance(e, FileNotFoundError) for e in chain) or re.search(r"NoSuchKey|Not Found|404", text):
        return EvalInputError(f"{where} does not exist; check the URL.")
    if re.search(r"Could not connect|EndpointConnectionError|ConnectTimeout|Cannot connect|Connection refused|"
                 r"ClientConnector|Name or service not known|ConnectionError|timed out", text):
        endpoint = os.environ.get("AWS_ENDPOINT_URL") if SCHEMES.get(_scheme(url)) == "s3" else None
        return EvalInputError(
            f"{where}: cannot reach the store" + (f" at {endpoint}" if endpoint else "")
            + "; check the network and the endpoint (AWS_ENDPOINT_URL for an S3-compatible store)."
        )
    detail = scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    return EvalInputError(f"{where}: {detail}")


# --------------------------------------------------------------------------- file systems


@lru_cache(maxsize=8)
def _filesystem(protocol: str) -> object:
    """The fsspec file system of a store, configured from the environment only."""
    import fsspec

    options: dict[str, object] = {}
    if protocol == "s3":
        # Fail in seconds, not minutes, on an endpoint that is down; s3fs and botocore
        # would otherwise retry with backoff for a long time.
        options = {"config_kwargs": {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 2, "mode": "standard"}}}
    return fsspec.filesystem(protocol, **options)


def filesystem(url: str) -> tuple[object, str]:
    """The fsspec file system of ``url`` and the path in it (``bucket/key``).

    Raises
    ------
    EvalInputError
        When the store's library is not installed (naming the extra that installs it).
    """
    protocol = SCHEMES.get(_scheme(url), _scheme(url))
    try:
        fs = _filesystem(protocol)
    except Exception as exc:
        raise store_error(url, exc) from None
    return fs, url[_URL.match(url).end():] if is_url(url) else url


def _full(fs: object, path: str, url: str) -> str:
    """A path of ``fs`` back as a URL of ``url``'s scheme."""
    return f"{SCHEMES.get(_scheme(url), _scheme(url))}://{path.lstrip('/')}"


def stat(url: str, what: str = "") -> dict | None:
    """fsspec's info of ``url`` (``type``, ``size``, ``ETag`` ...), or None when there is no such object or prefix.

    Raises
    ------
    EvalInputError
        When the store cannot be asked (no access, no bucket, no endpoint).
    """
    fs, path = filesystem(url)
    try:
        return fs.info(path)
    except FileNotFoundError as exc:
        bucket = path.split("/", 1)[0]
        if "/" in path and not _bucket_exists(fs, bucket):
            raise store_error(url, FileNotFoundError(f"NoSuchBucket {bucket}"), what) from None
        del exc
        return None
    except Exception as exc:
        raise store_error(url, exc, what) from None


def _bucket_exists(fs: object, bucket: str) -> bool:
    try:
        return bool(fs.exists(bucket))
    except Exception:  # the question itself failed: let the caller report the object
        return True


def parquet_parts(url: str, role: str) -> list[str]:
    """The ``*.parquet`` objects under a prefix (sorted, recursive, hidden and ``_`` parts left out), as URLs."""
    fs, path = filesystem(url)
    try:
        found = fs.find(path)
    except Exception as exc:
        raise store_error(url, exc, f"the {role} directory") from None
    base = path.rstrip("/") + "/"
    files = sorted(
        f for f in found
        if f.endswith(".parquet") and not any(part.startswith((".", "_")) for part in f[len(base):].split("/"))
    )
    if not files:
        raise EvalInputError(
            f"The {role} directory {url!r} holds no .parquet files; give a GeoParquet file, "
            "a directory of GeoParquet parts, or a file GDAL reads."
        )
    return [_full(fs, f, url) for f in files]


def list_files(url: str) -> list[str]:
    """Every object under a prefix, as paths relative to it (sorted)."""
    fs, path = filesystem(url)
    try:
        found = fs.find(path)
    except Exception as exc:
        raise store_error(url, exc) from None
    base = path.rstrip("/") + "/"
    return sorted(f[len(base):] for f in found if f.startswith(base))


def open_input(url: str) -> object:
    """A binary file object reading ``url`` with ranged reads: each read fetches exactly the bytes
    asked for (pyarrow asks for a footer, then whole column chunks); s3fs's default cache would
    read 50 MiB ahead of every seek."""
    fs, path = filesystem(url)
    try:
        return fs.open(path, "rb", cache_type="none")
    except Exception as exc:
        raise store_error(url, exc) from None


def parquet_file(path: str | os.PathLike) -> object:
    """A ``pyarrow.parquet.ParquetFile`` of a local file or a URL (footer and row groups read on demand)."""
    import pyarrow.parquet as pq

    if is_url(str(path)):
        return pq.ParquetFile(open_input(str(path)))
    return pq.ParquetFile(path)


def read_geoparquet(path: str | os.PathLike, **kwargs: object) -> object:
    """``geopandas.read_parquet`` of a local file or a URL (over the fsspec file system)."""
    import geopandas

    if is_url(str(path)):
        fs, inner = filesystem(str(path))
        return geopandas.read_parquet(inner, filesystem=fs, **kwargs)
    return geopandas.read_parquet(path, **kwargs)


def gdal_path(path: str | os.PathLike) -> str | os.PathLike:
    """What GDAL opens for ``path``: a local path as it is, a URL as its virtual file (``/vsis3/bucket/key``)."""
    if not is_url(str(path)):
        return path
    url = str(path)
    protocol = SCHEMES.get(_scheme(url), "")
    if protocol not in _GDAL_PREFIX:
        raise EvalInputError(f"{_shown(url)!r}: GDAL cannot read {protocol}:// URLs; give a GeoParquet layer or a local file.")
    _configure_gdal()
    return _GDAL_PREFIX[protocol] + url[_URL.match(url).end():]


def _gdal_endpoint_options(environ: dict) -> dict[str, str]:
    """GDAL's options for an S3-compatible endpoint given as ``AWS_ENDPOINT_URL``.

    Examples
    --------
    >>> _gdal_endpoint_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
    {'AWS_S3_ENDPOINT': '127.0.0.1:9000', 'AWS_HTTPS': 'NO', 'AWS_VIRTUAL_HOSTING': 'FALSE'}
    """
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        return {}
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    return {
        "AWS_S3_ENDPOINT": parts.netloc + parts.path.rstrip("/"),
        "AWS_HTTPS": "NO" if parts.scheme == "http" else "YES",
        # A custom endpoint (MinIO, Ceph, a local server) addresses buckets by path.
        "AWS_VIRTUAL_HOSTING": "FALSE",
    }


def _configure_gdal() -> None:
    """Give GDAL the endpoint of an S3-compatible store; keys it reads from the environment itself."""
    options = {k: v for k, v in _gdal_endpoint_options(dict(os.environ)).items() if k not in os.environ}
    if options:
        import pyogrio

        pyogrio.set_gdal_config_options(options)


# --------------------------------------------------------------------------- evidence


def object_facts(url: str) -> dict[str, object]:
    """SHA-256 (streamed, never loaded whole), size and the store's version tag (ETag, generation) of an object."""
    fs, path = filesystem(url)
    info = stat(url)
    if info is None:
        raise EvalInputError(f"{_shown(url)!r} does not exist.")
    tag = {}
    for key in ("ETag", "etag", "generation", "VersionId", "version_id"):
        value = info.get(key)
        if value not in (None, ""):
            tag[key.lower()] = str(value).strip('"')
    # A run hashes each input twice (its signature, then its input manifest): the second
    # time the object's version tag says it is the object already streamed. Without a
    # tag the object is streamed again.
    known = (url, tuple(sorted(tag.items())), int(info.get("size") or 0)) if tag else None
    if known in _FACTS:
        return dict(_FACTS[known])
    digest = hashlib.sha256()
    try:
        with fs.open(path, "rb", block_size=8 << 20) as handle:
            for block in iter(lambda: handle.read(8 << 20), b""):
                digest.update(block)
    except Exception as exc:
        raise store_error(url, exc) from None
    facts = {"sha256": digest.hexdigest(), "bytes": int(info.get("size") or 0), **tag}
    if known is not None:
        _FACTS[known] = dict(facts)
    return facts


_FACTS: dict[tuple, dict[str, object]] = {}
"""This process's :func:`object_facts` by (URL, version tag, size)."""


# --------------------------------------------------------------------------- writing


def put_file(local: str | os.PathLike, url: str) -> None:
    """Send a whole local file to ``url`` in one put (one PUT, or one completed multipart upload)."""
    fs, path = filesystem(url)
    try:
        fs.put_file(os.fspath(local), path)
    except Exception as exc:
        raise store_error(url, exc, "cannot write") from None


def remove(url: str) -> None:
    """Delete an object (missing is fine)."""
    fs, path = filesystem(url)
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass
    except Exception as exc:
        raise store_error(url, exc, "cannot delete") from None


def check_writable(url: str, option: str) -> None:
    """Find out now, not after the work, whether an output can be written beside ``url``: put a probe object, then delete it.

    Raises
    ------
    EvalInputError
        Naming the option and the URL: no access, no bucket, no endpoint.
    """
    probe = join(parent(url), f".evalcore-write-probe-{uuid.uuid4().hex[:12]}")
    fs, path = filesystem(probe)
    try:
        fs.pipe_file(path, b"")
    except Exception as exc:
        error = store_error(url, exc, option)
        raise EvalInputError(f"{error} (found by writing a probe object before any work)") from None
    try:
        fs.rm_file(path)
    except Exception:  # written but not deletable: the output will be written all the same
        pass


# --------------------------------------------------------------------------- run directories


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a local file, read in 1 MiB blocks (the one local file hash: done records,
    run directories, input manifests).

    A file this process hashed before, last changed more than two seconds before that,
    and unchanged since (the same device, inode, size, modification and change times) is
    not read again: a run hashes its inputs for its signature when it starts and for the
    input manifest when it ends (1.4 GB at 2M fields: 2.0 s for the signature's in a
    client profile). The change time is the kernel's: a copy that keeps the modification
    time (``cp -p``, ``touch -r``) still moves it.
    """
    key = _stat_key(os.stat(path))
    known = _HASHED.get(key)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    sha = digest.hexdigest()
    # Kept only for a file last changed well before (git's "racily clean" rule): a file
    # system's clock ticks in milliseconds, so a file written again just after being hashed
    # could keep its times; one written two seconds later cannot.
    settled = time.time_ns() - max(key[3], key[4]) > _SETTLED_NS
    if settled and _stat_key(os.stat(path)) == key:  # and not written to while read
        with _HASHED_LOCK:  # files are hashed on several threads (evalcore.threads.map_each)
            if len(_HASHED) >= _HASHED_MAX:
                _HASHED.pop(next(iter(_HASHED)))  # the oldest
            _HASHED[key] = sha
    return sha


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


_HASHED: dict[tuple[int, int, int, int, int], str] = {}
"""The hashes :func:`file_sha256` made in this process, by the file's (device, inode, size, modification and change times)."""
_HASHED_MAX = 65_536
_HASHED_LOCK = threading.Lock()
_SETTLED_NS = 2_000_000_000


@contextlib.contextmanager
def run_directory(path: str, *, write: bool = False) -> Iterator[Path]:
    """A run directory as a local directory: a local path as it is; a URL's objects fetched into a
    temporary copy that is removed afterwards.

    With ``write``, the files the block added or changed are put back, each in one put,
    when the block ends without an error (a failure sends nothing).

    Raises
    ------
    EvalInputError
        When the prefix cannot be read, or holds nothing.
    """
    url = check_url(path, "RUN_DIR") if is_url(path) else path
    if not is_url(url):
        yield Path(url)
        return
    fs, inner = filesystem(url)
    local = Path(tempfile.mkdtemp(prefix="evalcore-run-"))
    try:
        names = list_files(url)
        if not names:
            raise EvalInputError(f"{url!r} is not a run directory: the store holds nothing under it.")
        for rel in names:
            target = local / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                fs.get_file(f"{inner}/{rel}", str(target))
            except Exception as exc:
                raise store_error(join(url, rel), exc) from None
        before = {rel: file_sha256(local / rel) for rel in names}
        yield local
        if write:
            for found in sorted(q for q in local.rglob("*") if q.is_file()):
                rel = found.relative_to(local).as_posix()
                if before.get(rel) != file_sha256(found):
                    put_file(found, join(url, rel))
    finally:
        shutil.rmtree(local, ignore_errors=True)
