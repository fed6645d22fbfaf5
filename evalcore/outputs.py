"""What evalcore may write, replace and delete: outputs swapped in whole, work and run directories claimed.

The promise (docs/reliability.md, "Files"): evalcore never deletes or overwrites a file
it did not create, an output is replaced only by a whole new one, and a failure leaves
every earlier output as it was. This module is the one home of that promise:

* :class:`OutputSet` stages every output of a command in a hidden ``.evalcore-partial/``
  beside its target (same file system, so the final rename is atomic) and renames them
  into place together once all are whole; a failure removes the staged names only.
* An output in an object store (a URL, :mod:`evalcore.remote`) is staged in a local
  temporary directory and sent in one put per object when all are whole.
* A directory output (``--frame-out DIR/``, ``fields/``) is staged as a whole directory
  and swapped in for the old one, which is replaced only if it holds nothing but the
  ``part-*.parquet`` files evalcore writes (:func:`check_replaceable_directory`).
* A work directory records whether evalcore created it (:func:`claim_workdir`); after a
  successful run only the entries evalcore writes there are removed
  (:func:`release_workdir`), and the directory itself only if evalcore created it.
* A run directory (``evalcore run -o``) is claimed by one run at a time, with an
  advisory lock that dies with its holder (:class:`RunDirectoryLock`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path, PurePath, PurePosixPath

from evalcore import remote
from evalcore.errors import EvalInputError
from evalcore.review.layout import REVIEW_DIR
from evalcore.writers import STAGING_DIR, write_error

__all__ = [
    "OutputSet",
    "WORKDIR_ENTRIES",
    "WORKDIR_PHASE_ENTRIES",
    "RUN_LOCK",
    "RunDirectoryLock",
    "check_replaceable_directory",
    "check_run_directory",
    "check_new_directory",
    "check_not_inputs",
    "claim_workdir",
    "release_workdir",
    "remove_parts_directory",
    "replace_directory",
    "staged_path",
]

#: What a run writes into its work directory (evalcore.distributed: staging, runner, tasks); nothing else
#: there is ever removed by evalcore.
WORKDIR_PHASE_ENTRIES = ("prepared", "pairs", "resolve", "resolved", "sums", "select", "sites")
"""The phases' entries: cleared when a run's signature changes (evalcore.distributed.staging)."""
WORKDIR_ENTRIES = ("run.json", "input") + WORKDIR_PHASE_ENTRIES + ("outputs",)

#: Marker of a work directory claimed by evalcore: {"created": true} when evalcore made it.
WORKDIR_MARKER = ".evalcore-workdir.json"

#: The run directory's lock file (an advisory ``flock``; the file stays, the lock dies
#: with the process holding it). Not evidence: ``evalcore verify`` leaves it out.
RUN_LOCK = ".evalcore-run.lock"

#: Files a run directory may hold that mark it as one of evalcore's (an earlier run).
_RUN_MARKS = (RUN_LOCK, "status.json")

_PART_PREFIX = "part-"




def staged_path(target: str | os.PathLike) -> Path:
    """Where an output is written before it is renamed to ``target``: ``.evalcore-partial/NAME`` beside it.

    Beside the target, so the rename stays on one file system; under the target's own
    name, since the suffix chooses the format and the stem names a GeoPackage's layer.
    The name is fixed, not random: a resumed cluster run finds the parts it wrote.
    """
    target = Path(target)
    return target.parent / STAGING_DIR / target.name


def _remove_staging_dir(staged: Path) -> None:
    with contextlib.suppress(OSError):
        staged.parent.rmdir()  # only when empty: another command may be staging beside it


def _is_part(path: Path) -> bool:
    return path.is_file() and path.name.startswith(_PART_PREFIX) and path.suffix == ".parquet"


def check_replaceable_directory(path: str | os.PathLike, option: str) -> None:
    """Refuse a directory output that holds anything but evalcore's ``part-*.parquet`` files.

    Raises
    ------
    EvalInputError
        Naming the option, the directory and one file evalcore did not write.
    """
    if remote.is_url(str(path)) and remote.is_url(remote.normalise(str(path))):
        url = remote.normalise(str(path))
        info = remote.stat(url, option)
        if info is None:
            return
        if info.get("type") != "directory":
            raise EvalInputError(f"{option} {str(path)!r} is an object, not a prefix (directory); give a directory.")
        foreign = [rel for rel in remote.list_files(url) if "/" in rel or not (rel.startswith(_PART_PREFIX) and rel.endswith(".parquet"))]
        if foreign:
            raise EvalInputError(
                f"{option} {str(path)!r} holds {foreign[0]!r}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, "
                "which evalcore did not write; a directory output is replaced whole, so give an empty or new directory."
            )
        return
    p = Path(path)
    if not p.exists():
        return
    if not p.is_dir():
        raise EvalInputError(f"{option} {str(path)!r} is a file, not a directory; give a directory.")
    foreign = sorted(child.name for child in p.iterdir() if not _is_part(child))
    if foreign:
        raise EvalInputError(
            f"{option} {str(path)!r} holds {foreign[0]!r}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, "
            "which evalcore did not write; a directory output is replaced whole, so give an empty or new directory."
        )


def check_new_directory(path: str | os.PathLike, option: str, *, force: bool = False) -> None:
    """Refuse a non-empty output directory (``evalcore synth --out``) unless ``force``."""
    p = Path(path)
    if p.exists() and p.is_dir() and any(p.iterdir()) and not force:
        raise EvalInputError(
            f"{option} {str(path)!r} is not empty; give a new or empty directory, or add --force to replace the files evalcore writes there."
        )


class OutputSet:
    """The outputs of one command, staged and then renamed into place together.

    Use :meth:`file` and :meth:`directory` for the path to write each output to,
    :meth:`commit` once every output is whole, :meth:`abort` (or leave a ``with``
    block by an exception) to remove what was staged and leave the old outputs as
    they were.
    """

    def __init__(self) -> None:
        self._files: dict[Path, Path] = {}
        self._dirs: dict[Path, Path] = {}
        self._put_files: dict[str, Path] = {}
        self._put_dirs: dict[str, Path] = {}
        self._local: Path | None = None

    def _remote_staging(self, url: str) -> Path:
        """A fresh local place for an output bound for a store, under the URL's own name (the suffix chooses the format)."""
        if self._local is None:
            self._local = Path(tempfile.mkdtemp(prefix="evalcore-put-"))
        slot = self._local / str(len(self._put_files) + len(self._put_dirs))
        slot.mkdir()
        return slot / remote.name(url)

    def file(self, target: str | os.PathLike) -> Path:
        """Where to write the output file ``target`` (its staged name)."""
        target = remote.normalise(str(target)) if remote.is_url(str(target)) else target  # file:// is a local path
        if remote.is_url(target):
            url = target
            staged = self._remote_staging(url)
            self._put_files[url] = staged
            return staged
        target = Path(target)
        staged = staged_path(target)
        staged.parent.mkdir(parents=True, exist_ok=True)
        self._files[target] = staged
        return staged

    def directory(self, target: str | os.PathLike, option: str = "output") -> Path:
        """Where to write the parts of the directory output ``target``: a fresh staging directory.

        A staging directory left by an interrupted run is kept (a resumed cluster run
        reuses its parts); only ``part-*.parquet`` files may be in it. A directory bound
        for a store is staged in a local temporary directory.
        """
        target = remote.normalise(str(target)) if remote.is_url(str(target)) else target
        if remote.is_url(target):
            url = target
            check_replaceable_directory(url, option)
            staged = self._remote_staging(url)
            staged.mkdir()
            self._put_dirs[url] = staged
            return staged
        target = Path(str(target).rstrip("/" + os.sep) or ".")
        check_replaceable_directory(target, option)
        staged = staged_path(target)
        check_replaceable_directory(staged, option)
        staged.mkdir(parents=True, exist_ok=True)
        self._dirs[target] = staged
        return staged

    def commit(self) -> list[Path | str]:
        """Send every output bound for a store, then rename every local staged output to its target; return the targets.

        The puts come first: they are the ones that can fail on a network, and a failure
        then leaves every local output as it was.
        """
        done: list[Path | str] = []
        for url, staged in self._put_files.items():
            if staged.exists():
                remote.put_file(staged, url)
                done.append(url)
        for url, staged in self._put_dirs.items():
            _put_parts_directory(staged, url)
            done.append(url)
        self._put_files.clear()
        self._put_dirs.clear()
        self._remove_local()
        for target, staged in self._files.items():
            if staged.exists():
                os.replace(staged, target)
                done.append(target)
            _remove_staging_dir(staged)
        for target, staged in self._dirs.items():
            replace_directory(staged, target)
            _remove_staging_dir(staged)
            done.append(target)
        self._files.clear()
        self._dirs.clear()
        return done

    def _remove_local(self) -> None:
        if self._local is not None:
            shutil.rmtree(self._local, ignore_errors=True)
            self._local = None

    def abort(self) -> None:
        """Remove every staged output (never a target)."""
        self._put_files.clear()
        self._put_dirs.clear()
        self._remove_local()
        for staged in self._files.values():
            staged.unlink(missing_ok=True)
            _remove_staging_dir(staged)
        for staged in self._dirs.values():
            remove_parts_directory(staged)
            _remove_staging_dir(staged)
        self._files.clear()
        self._dirs.clear()

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is not None:
            self.abort()


def _put_parts_directory(staged: Path, url: str) -> None:
    """Send a directory of parts to a prefix (one put per part), then delete the old parts the new set does not have."""
    new = sorted(child.name for child in staged.iterdir() if _is_part(child))
    old = [] if remote.stat(url) is None else remote.list_files(url)
    for part in new:
        remote.put_file(staged / part, remote.join(url, part))
    for rel in old:
        if rel not in new and "/" not in rel and rel.startswith(_PART_PREFIX) and rel.endswith(".parquet"):
            remote.remove(remote.join(url, rel))


def remove_parts_directory(path: Path) -> None:
    """Remove a directory of evalcore's parts: its parts, then the directory if nothing else is left."""
    if not path.is_dir():
        return
    for child in path.iterdir():
        if _is_part(child):
            child.unlink()
    try:
        path.rmdir()
    except OSError:
        pass  # something else is there: it is not evalcore's to remove


def replace_directory(staged: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Swap the whole directory ``staged`` in for ``target`` (which holds only evalcore's parts, or is absent)."""
    staged, target = Path(staged), Path(target)
    if target.exists():
        check_replaceable_directory(target, str(target))
        old = staged.parent / f"{target.name}.old"
        remove_parts_directory(old)
        os.replace(target, old)
        os.replace(staged, target)
        remove_parts_directory(old)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, target)
    return target


def check_not_inputs(inputs: dict[str, str], outputs: dict[str, str | None], directories: set[str]) -> None:
    """Refuse an output that is an input, another output, or a directory holding an input (resolved paths).

    Parameters
    ----------
    inputs : dict
        ``{option: path}`` of the layers read.
    outputs : dict
        ``{option: path or None}`` of everything written.
    directories : set of str
        The options of ``outputs`` that are directories (an input inside one could be
        overwritten or removed when the run cleans it).
    """
    resolved_in = {opt: _resolved(path) for opt, path in inputs.items() if isinstance(path, (str, os.PathLike))}
    seen: dict[PurePath, str] = {}
    for opt, path in outputs.items():
        if path is None:
            continue
        target = _resolved(path)
        for in_opt, source in resolved_in.items():
            if target == source:
                raise EvalInputError(f"{opt} {path!r} is the input layer of {in_opt}; writing it would destroy the input. Choose another path.")
            if opt in directories and target in source.parents:
                raise EvalInputError(f"{opt} {path!r} holds the input layer of {in_opt} ({str(source)!r}); choose a directory of its own.")
            if source in target.parents and _is_directory(source):
                raise EvalInputError(f"{opt} {path!r} is inside the input directory of {in_opt} ({str(source)!r}); choose a path outside it.")
        if target in seen:
            raise EvalInputError(f"{opt} {path!r} is also {seen[target]}; give each output its own path.")
        seen[target] = opt


def _resolved(path: str | os.PathLike) -> PurePath:
    """A path or URL as one comparable name: a local path resolved, a URL normalised
    (under a root no local path has, so a URL never equals a local path)."""
    text = str(path)
    if remote.is_url(text):
        text = remote.normalise(text)
        if remote.is_url(text):
            scheme, _, rest = text.partition("://")
            return PurePosixPath("/", "<url>", scheme, *[p for p in rest.split("/") if p])
    return Path(text).resolve()


def _is_directory(source: PurePath) -> bool:
    """Whether an input (:func:`_resolved`) is a directory or, in a store, a prefix."""
    if source.parts[:2] == ("/", "<url>"):
        url = f"{source.parts[2]}://" + "/".join(source.parts[3:])
        try:
            info = remote.stat(url)
        except EvalInputError:  # the reader reports it, with its role
            return False
        return info is not None and info.get("type") == "directory"
    return Path(source).is_dir()


# --------------------------------------------------------------------------- work directories


def claim_workdir(path: str | os.PathLike, option: str = "--workdir") -> Path:
    """Make ``path`` a work directory of evalcore's, recording whether evalcore created it.

    A directory that already holds one of :data:`WORKDIR_ENTRIES` without the marker
    was not made by evalcore: its ``prepared/`` (say) could be the user's, and a run
    replaces those entries, so it is refused.
    """
    if remote.is_url(str(path)) and remote.is_url(remote.normalise(str(path))):
        return _claim_remote_workdir(remote.normalise(str(path)), option)
    p = Path(path)
    marker = p / WORKDIR_MARKER
    if marker.exists():
        return p
    if p.exists() and not p.is_dir():
        raise EvalInputError(f"{option} {str(path)!r} is a file, not a directory; give a directory.")
    created = not p.exists()
    if not created:
        clash = sorted(name for name in WORKDIR_ENTRIES if (p / name).exists())
        if clash:
            raise EvalInputError(
                f"{option} {str(path)!r} already holds {clash[0]!r}, which evalcore did not write there; "
                "give an empty or new directory (evalcore creates it)."
            )
    p.mkdir(parents=True, exist_ok=True)
    try:
        marker.write_text(json.dumps({"created": created}) + "\n", encoding="utf-8")
    except OSError as exc:
        raise write_error(marker, exc) from None
    return p


def _claim_remote_workdir(url: str, option: str) -> str:
    """:func:`claim_workdir` of a store prefix: the marker is an object (a prefix exists only while it holds objects)."""
    marker = remote.join(url, WORKDIR_MARKER)
    if remote.stat(marker, option) is not None:
        return url
    held = remote.list_files(url) if remote.stat(url, option) is not None else []
    clash = sorted({rel.split("/", 1)[0] for rel in held} & set(WORKDIR_ENTRIES))
    if clash:
        raise EvalInputError(
            f"{option} {url!r} already holds {clash[0]!r}, which evalcore did not write there; "
            "give an empty or new prefix (evalcore creates it)."
        )
    with tempfile.TemporaryDirectory(prefix="evalcore-claim-") as tmp:
        local = Path(tmp) / WORKDIR_MARKER
        local.write_text(json.dumps({"created": not held}) + "\n", encoding="utf-8")
        remote.put_file(local, marker)
    return url


def _release_remote_workdir(url: str) -> None:
    """:func:`release_workdir` of a store prefix: evalcore's entries and the marker are deleted (a prefix has no directory to remove)."""
    marker = remote.join(url, WORKDIR_MARKER)
    if remote.stat(marker) is None:
        return
    for rel in remote.list_files(url):
        if rel.split("/", 1)[0] in WORKDIR_ENTRIES:
            remote.remove(remote.join(url, rel))
    remote.remove(marker)


def release_workdir(path: str | os.PathLike) -> None:
    """After a successful run: remove what evalcore wrote in the work directory, and the directory if evalcore made it."""
    if remote.is_url(str(path)) and remote.is_url(remote.normalise(str(path))):
        _release_remote_workdir(remote.normalise(str(path)))
        return
    p = Path(path)
    marker = p / WORKDIR_MARKER
    if not marker.exists():
        return  # not claimed: nothing of it is evalcore's to remove
    try:
        created = bool(json.loads(marker.read_text(encoding="utf-8")).get("created"))
    except (OSError, ValueError):
        created = False
    for name in WORKDIR_ENTRIES:
        entry = p / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.exists() or entry.is_symlink():
            entry.unlink(missing_ok=True)
    marker.unlink(missing_ok=True)
    if created:
        try:
            p.rmdir()  # only if empty: a file added by someone else during the run stays, with its directory
        except OSError:
            pass


# --------------------------------------------------------------------------- run directories


def check_remote_run_directory(url: str, option: str = "-o/--output-dir") -> None:
    """:func:`check_run_directory` of a store prefix: new, empty, or an earlier evalcore run's without a human review."""
    held = remote.list_files(url) if remote.stat(url, option) is not None else []
    if held and not any(rel in _RUN_MARKS for rel in held):
        raise EvalInputError(
            f"{option} {url!r} already holds objects of something other than an evalcore run (e.g. {held[0]!r}); "
            "give an empty or new prefix, or an earlier run's."
        )
    if any(rel.split("/", 1)[0] == REVIEW_DIR for rel in held):
        raise EvalInputError(f"{option} {url!r} holds a human review ({REVIEW_DIR}/); give a new prefix for the rerun.")


def put_run_directory(local: str | os.PathLike, url: str) -> list[str]:
    """Send a finished run directory, written locally, to a store prefix, object by object (each in one put).

    ``status.json``, the run's completion marker, goes last, so a reader that sees
    "succeeded" finds every other object already there; then an earlier run's objects
    that this run did not write are deleted (a review and the work directory excepted).
    Returns the relative names written.
    """
    local = Path(local)
    names = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and p.name != RUN_LOCK)
    ordered = [n for n in names if n != "status.json"] + [n for n in names if n == "status.json"]
    old = remote.list_files(url) if remote.stat(url) is not None else []
    for rel in ordered:
        remote.put_file(local / rel, remote.join(url, rel))
    for rel in sorted(set(old) - set(names)):
        if rel.split("/", 1)[0] not in (REVIEW_DIR, "work") and rel != WORKDIR_MARKER:
            remote.remove(remote.join(url, rel))
    return ordered


def check_run_directory(path: str | os.PathLike, option: str = "-o/--output-dir") -> None:
    """A run directory must be new, empty, or an earlier evalcore run's (a rerun replaces its outputs)
    that holds no human review (``review/``, :mod:`evalcore.review`)."""
    p = Path(path)
    if not p.exists():
        return
    if not p.is_dir():
        raise EvalInputError(f"{option} {str(path)!r} is a file, not a directory; give a directory.")
    children = [c.name for c in p.iterdir()]
    if children and not any((p / mark).is_file() for mark in _RUN_MARKS):
        raise EvalInputError(
            f"{option} {str(path)!r} holds files that are not an evalcore run (e.g. {sorted(children)[0]!r}); "
            "give a new or empty directory, or an earlier run's directory to replace that run."
        )
    review = p / REVIEW_DIR
    if review.is_dir() and any(review.iterdir()):
        # Reviewers' decisions are about the earlier run's objects: a rerun would leave
        # them describing a run that no longer exists, and deleting them loses their work.
        raise EvalInputError(
            f"{option} {str(path)!r} holds a human review of the earlier run ({REVIEW_DIR}/); a rerun would "
            f"replace the run it reviews. Move {REVIEW_DIR}/ elsewhere to keep it, or choose another run directory."
        )


class RunDirectoryLock:
    """An exclusive claim on a run directory for the life of this process (``fcntl.flock``).

    The lock file records who holds it (host, process id, start time) for the message
    a second run gets. The kernel releases the lock when the holder exits, however it
    exits, so a killed run never leaves the directory claimed.
    """

    def __init__(self, run_dir: str | os.PathLike, option: str = "-o/--output-dir") -> None:
        self.path = Path(run_dir) / RUN_LOCK
        self.option = option
        self._fd: int | None = None

    def acquire(self) -> RunDirectoryLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise write_error(self.path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                os.close(fd)
                raise
            holder = _read_holder(fd)
            os.close(fd)
            raise EvalInputError(
                f"{self.option} {str(self.path.parent)!r} is in use by another evalcore run ({holder}); "
                "wait for it to finish or choose another run directory."
            ) from None
        holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise write_error(self.path, exc) from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None

    def __enter__(self) -> RunDirectoryLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return "holder unknown"
    if not holder:
        return "holder unknown"
    return f"process {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
