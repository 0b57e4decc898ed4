"""Local files that appear whole or not at all: the lake's files on a local disk and the command's
outputs (exports, documents, reports) are written under a hidden name beside their own and renamed
into place. Light on purpose (the core layer): the command's outputs use it without loading Beam."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator


@contextlib.contextmanager
def local_atomic(path: str) -> Iterator[str]:
    """Where to write the local file ``path`` so that it appears whole or not at all: a hidden name
    beside it (``.<name>.<random>.tmp``, which listings of ``*.parquet`` or ``*.json`` skip), renamed
    over ``path`` when the block ends; removed if the block raises. A task that runs again after its
    worker was lost writes the same file while tasks of the next stage may be reading the first copy:
    they keep reading the copy they opened."""
    folder, name = os.path.split(path)
    os.makedirs(folder or ".", exist_ok=True)
    partial = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        yield partial
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
