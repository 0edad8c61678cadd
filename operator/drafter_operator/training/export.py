"""Export never leaves a half-written or mixed drafter at spec.output.path, and never destroys one by accident.

The Export stage's commands write into a fresh staging directory beside the output (same parent, so a
rename moves it: ``.<name>.tmp-g<generation>``, named after the spec generation so an older
generation's Export pod still finishing never writes into a newer one's). Only once they all succeeded
does ``publish`` record the content digest (``drafter-digest.json`` inside the directory) and rename the
directory into place. Until that rename the old output (if any) is untouched, whatever crashes.

An existing ``output.path`` is refused unless ``spec.output.overwrite`` is set (``prepare`` checks it before
the stage works, ``publish`` again before the rename). With overwrite the new directory is exchanged with
the old one in one atomic ``renameat2(RENAME_EXCHANGE)`` where the filesystem supports it; elsewhere the old
one is renamed aside (``.<name>.old-g<generation>``) and the new one renamed in, a window in which
output.path is missing but no byte of either is lost. The old one is deleted last.

The operator never lets an Export overwrite a path a DrafterServing loads (controllers/training/decide.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

DIGEST_FILE = "drafter-digest.json"
_CHUNK = 1 << 20


class ExportRefused(Exception):
    """Export must not write: the output exists and the spec does not allow replacing it (OutputExists), or
    its parent directory is missing or not the trainer's to write (OutputParentNotWritable). The message
    names the field and the fix."""

    def __init__(self, message: str, reason: str = "OutputExists"):
        super().__init__(message)
        self.reason = reason


def staging_path(output: str, tag: str) -> str:
    """Where Export writes before the rename: ``<parent>/.<name>.tmp-<tag>``."""
    parent, name = output.rsplit("/", 1)
    return f"{parent}/.{name}.tmp-{tag}"


def aside_path(output: str, tag: str) -> str:
    """Where an overwritten output waits for deletion when the filesystem cannot exchange two directories."""
    parent, name = output.rsplit("/", 1)
    return f"{parent}/.{name}.old-{tag}"


def content_digest(root: str | Path) -> str:
    """``sha256:<hex>`` over the files under ``root``: for each in order of its relative POSIX path, the path,
    a NUL, its size in 8 bytes big-endian and its bytes (DIGEST_FILE itself left out). Two directories have the
    same digest exactly when they hold the same files with the same bytes."""
    root = Path(root)
    files = sorted((p for p in root.rglob("*") if p.is_file() and p.relative_to(root).as_posix() != DIGEST_FILE),
                   key=lambda p: p.relative_to(root).as_posix())
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.stat().st_size.to_bytes(8, "big"))
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def refusal(output: str) -> str:
    """Why an existing output is not replaced, naming the field and the fix."""
    return (f"spec.output.path {output} already exists: set spec.output.overwrite: true to replace it "
            "(never while a DrafterServing loads it), or choose a new path")


def parent_problem(output: str, writable: Callable[[str], bool] | None = None) -> str | None:
    """Why Export could not write beside ``output``, or None. The parent directory must exist beforehand and
    be writable by the trainer (UID/GID 1000): the Export pod may write only that directory (a subPath
    mount), and a kubelet that creates a missing subPath directory makes it root's, mode 0755."""
    parent = output.rsplit("/", 1)[0]
    if not os.path.isdir(parent):
        return (f"the parent directory of spec.output.path {output} does not exist: create {parent} on the model "
                "volume, writable by UID or GID 1000 (the trainer), e.g. mkdir -p and chown 1000:1000 "
                "(docs/training.md, Export)")
    if not (writable or _writable_by_me)(parent):
        return (f"the parent directory of spec.output.path {output} is not writable by the trainer (UID/GID "
                f"1000): make {parent} writable by it, e.g. chown 1000:1000 or chmod g+w with the volume's "
                "group 1000 (docs/training.md, Export)")
    return None


def _writable_by_me(path: str) -> bool:
    """Writable by this process by its mode bits (the stages before Export see the volume read-only, where
    os.access says no to everyone)."""
    info = os.stat(path)
    if os.geteuid() == 0:
        return True
    if info.st_uid == os.geteuid():
        return bool(info.st_mode & 0o200)
    if info.st_gid in (os.getegid(), *os.getgroups()):
        return bool(info.st_mode & 0o020)
    return bool(info.st_mode & 0o002)


def prepare(output: str, staging: str, overwrite: bool) -> None:
    """Before the stage's commands: refuse an existing output without overwrite, and a parent the trainer
    cannot write; give the commands an empty place to write (a staging directory left by a crashed attempt
    of this generation is removed)."""
    if os.path.lexists(output) and not overwrite:
        raise ExportRefused(refusal(output))
    problem = parent_problem(output, writable=lambda p: os.access(p, os.W_OK | os.X_OK))
    if problem:
        raise ExportRefused(problem, "OutputParentNotWritable")
    if os.path.lexists(staging):
        shutil.rmtree(staging) if os.path.isdir(staging) and not os.path.islink(staging) else os.unlink(staging)


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where the kernel or filesystem
    cannot (then the caller falls back to two renames)."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), a)


def publish(output: str, staging: str, overwrite: bool, tag: str,
            rename: Callable[[str, str], None] = os.rename,
            exchange: Callable[[str, str], bool] = _exchange) -> str:
    """After the stage's commands succeeded: write the digest into ``staging`` and move it to ``output``.
    Returns the digest. ``rename`` and ``exchange`` are the filesystem's (tests replace them to crash)."""
    if not os.path.isdir(staging):
        raise FileNotFoundError(f"Export wrote nothing to {staging}")
    digest = content_digest(staging)
    with open(os.path.join(staging, DIGEST_FILE), "w") as handle:
        json.dump({"digest": digest}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    if not os.path.lexists(output):
        rename(staging, output)
        return digest
    if not overwrite:
        raise ExportRefused(refusal(output))
    if exchange(staging, output):
        old = staging  # the exchange left the old output where the new one was
    else:
        old = aside_path(output, tag)
        rename(output, old)
        rename(staging, output)
    shutil.rmtree(old, ignore_errors=True)
    return digest
