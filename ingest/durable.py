"""Files that survive a crash: replaced whole, or appended to and on disk before the call returns.

``replacing`` gives a temporary path beside a file; what is written there
replaces the file in one rename, so a reader sees the old file or the new one,
never part of one (with ``fsync``, the new bytes reach the disk before the
rename, and the rename before the call returns). ``append_durable`` appends and
fsyncs: the bytes are on disk when it returns. A crash can tear only an append
that never returned.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


def fsync_path(path: Path) -> None:
    """Flush a file's or a folder's (its entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """Flush every file and folder under ``folder``, deepest first, then ``folder`` itself."""
    for path in sorted(folder.rglob("*"), reverse=True):
        fsync_path(path)
    fsync_path(folder)


@contextlib.contextmanager
def replacing(path: Path, fsync: bool = True) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to; renamed over ``path`` on leaving the block
    (removed instead if the block raises)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        if fsync:
            fsync_path(tmp)
        os.replace(tmp, path)
        if fsync:
            fsync_path(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def append_durable(path: Path, data: bytes, new: bool = False) -> int:
    """Append ``data`` to ``path`` and fsync it; returns the file's length. ``new``: the file must not
    exist yet (FileExistsError), and its name is made durable too."""
    with Path(path).open("xb" if new else "ab") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
        size = fh.tell()
    if new:
        fsync_path(Path(path).parent)
    return size
