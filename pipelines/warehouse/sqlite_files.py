"""The SQLite files this process has written, so that a command can tell, before it reports success,
that one of them was deleted or replaced under it (SQLite keeps writing to a deleted file's inode and
what went into it is lost). One registry per process; ``forget`` starts a command's own."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

_FILES: dict[str, tuple[int, int]] = {}  # file -> (device, inode) when this process first opened it


def remember(path: str) -> Callable[[object, object], None]:
    """A ``connect`` listener that records ``path``'s identity the first time it is opened."""

    def on_connect(_dbapi_connection: object, _record: object) -> None:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            _FILES.setdefault(os.path.abspath(path), (st.st_dev, st.st_ino))

    return on_connect


def forget() -> None:
    _FILES.clear()


def vanished() -> list[str]:
    """SQLite files this process wrote that are gone or replaced since."""
    lost = []
    for path, ident in _FILES.items():
        try:
            st = os.stat(path)
        except OSError:
            lost.append(path)
            continue
        if (st.st_dev, st.st_ino) != ident:
            lost.append(path)
    return lost
