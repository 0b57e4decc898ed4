"""An object store in memory, as a Beam FileSystem (``memfs://bucket/key``), for tests of remote lakes.

It keeps the semantics of Google Cloud Storage's Beam FileSystem that matter to the lake: there are
no directories, only objects whose names share a prefix; ``exists`` is true for an object, not for a
prefix; ``*`` does not cross a ``/``; ``delete`` of a path ending in ``/`` removes everything under
it, of any other path only that object; a ``.gz`` name is (de)compressed by ``open`` and ``create``
unless the caller says otherwise; a written object appears when its handle is closed. Importing this
module registers the scheme (Beam finds FileSystem subclasses by their ``scheme``).
"""

from __future__ import annotations

import io
import threading
import time

from apache_beam.io.filesystem import (
    BeamIOError,
    CompressedFile,
    CompressionTypes,
    FileMetadata,
    FileSystem,
)

PREFIX = "memfs://"


class _Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, tuple[bytes, float]] = {}

    def put(self, path: str, data: bytes) -> None:
        with self.lock:
            self.objects[path] = (data, time.time())

    def get(self, path: str) -> bytes:
        with self.lock:
            if path not in self.objects:
                raise FileNotFoundError(f"no such object: {path}")
            return self.objects[path][0]

    def under(self, prefix: str) -> list[tuple[str, int, float]]:
        with self.lock:
            return sorted((p, len(d), t) for p, (d, t) in self.objects.items() if p.startswith(prefix))

    def remove(self, path: str) -> None:
        with self.lock:
            self.objects.pop(path, None)

    def clear(self) -> None:
        with self.lock:
            self.objects.clear()


STORE = _Store()


class _Download(io.BytesIO):
    mode = "rb"


class _Upload(io.BytesIO):
    """Buffers the bytes; the object appears (whole) on close, as an upload does."""

    mode = "wb"

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def close(self) -> None:
        if not self.closed:
            STORE.put(self._path, self.getvalue())
        super().close()


class MemFileSystem(FileSystem):
    @classmethod
    def scheme(cls) -> str:
        return "memfs"

    def join(self, basepath: str, *paths: str) -> str:
        path = basepath
        for p in paths:
            path = path.rstrip("/") + "/" + p.lstrip("/")
        return path

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rpartition("/")
        return head, tail

    def mkdirs(self, path: str) -> None:
        pass

    def has_dirs(self) -> bool:
        return False

    def _list(self, dir_or_prefix: str):  # type: ignore[no-untyped-def]
        for path, size, updated in STORE.under(dir_or_prefix):
            yield FileMetadata(path, size, updated)

    def _compression(self, path: str, compression_type: str) -> str:
        return FileSystem._get_compression_type(path, compression_type)

    def create(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):  # type: ignore[no-untyped-def]
        raw = _Upload(path)
        compression = self._compression(path, compression_type)
        return raw if compression == CompressionTypes.UNCOMPRESSED else CompressedFile(raw, compression)

    def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):  # type: ignore[no-untyped-def]
        raw = _Download(STORE.get(path))
        compression = self._compression(path, compression_type)
        return raw if compression == CompressionTypes.UNCOMPRESSED else CompressedFile(raw, compression)

    def copy(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        errors = {}
        for src, dst in zip(source_file_names, destination_file_names, strict=True):
            try:
                STORE.put(dst, STORE.get(src))
            except FileNotFoundError as exc:
                errors[(src, dst)] = exc
        if errors:
            raise BeamIOError("Copy operation failed", errors)

    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        self.copy(source_file_names, destination_file_names)
        for src in source_file_names:
            STORE.remove(src)

    def exists(self, path: str) -> bool:
        return path in {p for p, _, _ in STORE.under(path)}

    def size(self, path: str) -> int:
        return len(STORE.get(path))

    def last_updated(self, path: str) -> float:
        return dict((p, t) for p, _, t in STORE.under(path))[path]

    def checksum(self, path: str) -> str:
        return str(hash(STORE.get(path)))

    def metadata(self, path: str) -> FileMetadata:
        return FileMetadata(path, self.size(path), self.last_updated(path))

    def delete(self, paths: list[str]) -> None:
        for path in paths:
            if path.endswith("/"):
                for p, _, _ in STORE.under(path):
                    STORE.remove(p)
            else:
                STORE.remove(path)
