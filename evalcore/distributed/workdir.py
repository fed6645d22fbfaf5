"""The work directory's I/O: the one place that knows whether it is local or on an object store.

A work directory is a local path or a store URL (``s3://bucket/work``). Every process
(the client and each worker) reads and writes a URL work directory through its own
scratch copy, a *mirror*::

    <scratch>/evalcore-store-<pid>/<quoted URL>/<relative path>

The mirror's path names the URL, so a path another process wrote into a task's
arguments or a done record (its own mirror's path) still says which object it means:
:func:`local` turns any work-directory path into this process's mirror path of the same
object. Then:

* :func:`fetch` before reading: the object is downloaded into the mirror unless the
  copy there is of its current version (its ETag: a worker outlives runs, and a later
  run may write an object of the same name anew);
* :func:`publish` after writing: the mirror's file is sent in one put
  (:func:`evalcore.remote.put_file`), so an object is never seen half-written; done
  records are published after the files they name, so a partition's outputs count only
  when whole;
* :func:`files`, :func:`exists`, :func:`etag` and :func:`remove_tree` ask the store.

For a local work directory every function is the identity or the plain file-system
call, so a local run costs what it did before. No process reads another's files: on a
cluster without a shared file system everything passes through the store.

``<scratch>`` is ``$EVALCORE_SCRATCH`` or the system's temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from urllib.parse import quote, unquote

from evalcore import remote

__all__ = ["is_remote", "root", "local", "url_of", "fetch", "publish", "files", "exists", "etag", "remove", "remove_files", "remove_tree", "discard", "scratch"]

_PREFIX = "evalcore-store-"
_MIRROR = re.compile(r"(?:^|/)" + _PREFIX + r"[^/]+/([^/]+)(?:/(.*))?$")


def scratch() -> Path:
    """This process's mirror directory (``<scratch>/evalcore-store-<pid>``)."""
    base = os.environ.get("EVALCORE_SCRATCH") or tempfile.gettempdir()
    return Path(base) / f"{_PREFIX}{os.getpid()}"


def is_remote(workdir: str | os.PathLike) -> bool:
    """Whether ``workdir`` is a store URL or a path in a mirror of one."""
    text = os.fspath(workdir)
    return remote.is_url(text) or _MIRROR.search(text) is not None


def root(workdir: str | os.PathLike) -> Path:
    """The local root through which this process uses ``workdir``: the path itself, or this process's mirror of the URL."""
    text = os.fspath(workdir)
    if remote.is_url(text):
        return scratch() / quote(remote.normalise(text), safe="")
    return local(text)


def url_of(path: str | os.PathLike) -> str | None:
    """The store URL of a mirror path (None for a plain local path)."""
    text = Path(path).as_posix() if not isinstance(path, str) else path
    if remote.is_url(text):
        return remote.normalise(text)
    match = _MIRROR.search(text)
    if match is None:
        return None
    base = unquote(match.group(1))
    return remote.join(base, match.group(2)) if match.group(2) else base


def local(path: str | os.PathLike) -> Path:
    """This process's path of a work-directory file: a plain path as it is; a URL, or another process's mirror path, re-rooted in this process's mirror."""
    text = os.fspath(path)
    if remote.is_url(text):
        return root(text)
    match = _MIRROR.search(text)
    if match is None:
        return Path(path)
    own = scratch() / match.group(1)
    return own / match.group(2) if match.group(2) else own


_HELD: dict[str, str] = {}
"""This process's mirror files and the ETag of the object each is a copy of: a worker
lives through many runs, and a later run may write an object of the same name anew."""


def _tag(info: dict) -> str | None:
    value = info.get("ETag") or info.get("etag") or info.get("generation")
    return str(value).strip('"') if value not in (None, "") else None


def fetch(path: str | os.PathLike, fresh: bool = False) -> Path:
    """The local path to read a work-directory file at: for a URL's, this process's copy,
    downloaded unless the copy here is of the object's current version (its ETag, one
    HEAD request).

    ``fresh`` is accepted for readability at the call sites that must never read an old
    copy (done records); every fetch checks the version. A missing object is no error
    here: the local copy is dropped and the caller's read fails as for a missing file.
    """
    target = local(path)
    url = url_of(path)
    if url is None:
        return target
    info = _info(url)
    if info is None:
        target.unlink(missing_ok=True)
        _HELD.pop(str(target), None)
        return target
    tag = _tag(info)
    if target.is_file() and tag is not None and _HELD.get(str(target)) == tag:
        return target
    fs, inner = remote.filesystem(url)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        fs.get_file(inner, str(tmp))
    except FileNotFoundError:
        tmp.unlink(missing_ok=True)
        return target
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise remote.store_error(url, exc) from None
    os.replace(tmp, target)
    if tag is not None:
        _HELD[str(target)] = tag
    return target


def publish(path: str | os.PathLike) -> Path:
    """Send a work-directory file just written (at :func:`local` of ``path``) to the store, in one put; returns the local path."""
    target = local(path)
    url = url_of(path)
    if url is not None:
        remote.put_file(target, url)
        info = _info(url)
        if info is not None and _tag(info) is not None:
            _HELD[str(target)] = _tag(info)  # this copy is the object now on the store
    return target


def files(directory: str | os.PathLike, pattern: str = "*") -> list[Path]:
    """The files directly in a work-directory directory matching ``pattern`` (sorted), as this process's paths (not fetched)."""
    here = local(directory)
    url = url_of(directory)
    if url is None:
        return sorted(here.glob(pattern))
    fs, inner = remote.filesystem(url)
    try:
        found = fs.ls(inner, detail=False, refresh=True)
    except FileNotFoundError:
        return []
    except Exception as exc:
        raise remote.store_error(url, exc) from None
    names = [n.rstrip("/").rpartition("/")[2] for n in found]
    return sorted(here / n for n in names if Path(n).match(pattern) and not n.startswith("."))


def _info(url: str) -> dict | None:
    """The store's current facts of an object (never from a listing cached earlier: other processes write here too)."""
    fs, inner = remote.filesystem(url)
    try:
        return fs.info(inner, refresh=True)
    except FileNotFoundError:
        return None
    except TypeError:  # a file system without the refresh option
        return remote.stat(url)
    except Exception as exc:
        raise remote.store_error(url, exc) from None


def exists(path: str | os.PathLike) -> bool:
    """Whether a work-directory file exists (on the store for a URL's)."""
    url = url_of(path)
    if url is None:
        return Path(path).exists()
    return _info(url) is not None


def etag(path: str | os.PathLike) -> str | None:
    """The store's version tag of a work-directory object (None for a local file or a missing object)."""
    url = url_of(path)
    if url is None:
        return None
    info = _info(url)
    return None if info is None else _tag(info)


def remove(path: str | os.PathLike) -> None:
    """Remove a work-directory file: locally, and on the store for a URL's."""
    local(path).unlink(missing_ok=True)
    url = url_of(path)
    if url is not None:
        remote.remove(url)


def remove_files(directory: str | os.PathLike, *patterns: str) -> None:
    """Remove the work-directory files directly in ``directory`` that match any of ``patterns`` (:func:`files`, :func:`remove`)."""
    for pattern in patterns:
        for path in files(directory, pattern):
            remove(path)


def remove_tree(directory: str | os.PathLike) -> None:
    """Remove a work-directory directory: locally, and on the store for a URL's."""
    shutil.rmtree(local(directory), ignore_errors=True)
    url = url_of(directory)
    if url is None:
        return
    fs, inner = remote.filesystem(url)
    try:
        if fs.exists(inner):
            fs.rm(inner, recursive=True)
    except FileNotFoundError:
        pass
    except Exception as exc:
        raise remote.store_error(url, exc, "cannot delete") from None


def discard(workdir: str | os.PathLike) -> None:
    """Remove this process's mirror of a store work directory (the store keeps everything); a local work directory is left alone."""
    if not is_remote(workdir):
        return
    mirror = root(url_of(workdir) or workdir)
    shutil.rmtree(mirror, ignore_errors=True)
    for held in [h for h in _HELD if h.startswith(str(mirror) + os.sep)]:
        del _HELD[held]
    with_nothing = scratch()
    if with_nothing.is_dir() and not any(with_nothing.iterdir()):
        with_nothing.rmdir()
