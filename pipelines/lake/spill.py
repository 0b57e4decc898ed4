"""Spill files between Beam stages: Arrow IPC segments and NumPy arrays, on the lake's file system.

A spill file holds segments of one table (a read unit's rows of each shard, a shard's rows of each
day), one after another, each a whole Arrow IPC stream of its own: its schema, its dictionaries cut
down to the values it uses, its record batches. What travels between stages is (file, first byte,
end byte); a reader reads exactly that range in one read, one ranged request on an object store, and
needs no footer. Thousands of segments are read per run (every read unit times every shard): an IPC
file's footer and per-batch reads made that five requests each.
"""

from __future__ import annotations

import io
import pickle
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from pipelines.errors import UsageBillingError
from pipelines.lake import objects
from pipelines.lake.paths import (
    create_object,
    io_errors,
    is_local,
    open_object,
)
from pipelines.runtime.files import local_atomic

T = TypeVar("T")

# (path, first byte, end byte) of a segment: what write_ipc_segments returns and the readers take.
Segment = tuple[str, int, int]


@io_errors
def write_ipc_segments(path: str, table: pa.Table, segments: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each (offset, length) segment of ``table`` as an Arrow IPC stream of its own, one after another
    in one file; returns each segment's byte range [first, end), for ``read_ipc_segment`` to read back
    just that segment.

    The file appears whole or not at all (on a local disk: written beside it, then renamed; an object
    is stored when it is closed). A task that runs again after its worker was lost writes the same
    bytes under the same name, while tasks of the next stage may be reading the first copy."""
    ranges: list[tuple[int, int]] = []
    if is_local(path):
        # Buffered: the writer hands over every column buffer of every batch on its own.
        with (
            local_atomic(path) as partial,
            pa.BufferedOutputStream(pa.OSFile(partial, "wb"), buffer_size=1 << 20) as sink,
        ):
            _write_segments(sink, table, segments, ranges)
        return ranges
    with create_object(path) as handle:  # uploaded when closed (``objects.ObjectWriter`` on S3)
        _write_segments(handle, table, segments, ranges)
    return ranges


def ipc_segments(table: pa.Table, segments: list[tuple[int, int]]) -> list[pa.Buffer]:
    """Each (offset, length) segment of ``table`` as the Arrow IPC stream ``write_ipc_segments`` would
    write, in memory: slices of one buffer, for a runner that carries them between its tasks. The
    streams are measured first (a stream that counts bytes and keeps none), then written once into a
    buffer of that size: a growing buffer copies everything each time it doubles (3x the CPU)."""
    parts = [_own_dictionaries(table.slice(offset, length)) for offset, length in segments]
    if not parts:
        return []
    sizes: list[tuple[int, int]] = []
    _write_parts(pa.MockOutputStream(), parts, sizes)
    data = pa.allocate_buffer(sizes[-1][1])
    ranges: list[tuple[int, int]] = []
    _write_parts(pa.FixedSizeBufferWriter(data), parts, ranges)
    return [data.slice(first, end - first) for first, end in ranges]


def read_ipc_buffer(data: pa.Buffer) -> pa.Table:
    """A segment that ``ipc_segments`` made."""
    return _stream(data, "an in-memory spill segment")


class CarriedSegment:
    """A segment of rows handed from one task to the next by a runner that keeps task results in memory
    (Dask): the rows themselves while they stay in the process, nothing copied or serialized; the Arrow
    IPC stream ``ipc_segments`` makes when the runner pickles the segment to move it to another worker
    (or to disk). A pickled slice of a table would hold the whole table's buffers; the stream holds only
    the segment's rows and the dictionary values they use."""

    __slots__ = ("table",)

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    def __sizeof__(self) -> int:  # what Dask's memory accounting counts
        return object.__sizeof__(self) + self.nbytes

    def __reduce_ex__(self, protocol: Any) -> tuple[Callable[[Any], CarriedSegment], tuple[Any]]:
        (data,) = ipc_segments(self.table, [(0, self.table.num_rows)])
        # Protocol 5 lets the pickler hand the buffer over as it is (Dask sends it out of band).
        return _carried, (pickle.PickleBuffer(data) if protocol >= 5 else data.to_pybytes(),)


def carried_segments(table: pa.Table, segments: list[tuple[int, int]]) -> list[CarriedSegment]:
    """Each (offset, length) segment of ``table`` for a runner to carry between tasks in memory."""
    return [CarriedSegment(_own_dictionaries(table.slice(offset, length))) for offset, length in segments]


def _carried(data: Any) -> CarriedSegment:
    return CarriedSegment(read_ipc_buffer(pa.py_buffer(data)))


def _write_segments(sink: Any, table: pa.Table, segments: list[tuple[int, int]], ranges: list) -> None:
    parts = (_own_dictionaries(table.slice(offset, length)) for offset, length in segments)
    _write_parts(sink, parts, ranges)


def _write_parts(sink: Any, parts: Iterable[pa.Table], ranges: list) -> None:
    for part in parts:
        first = sink.tell()
        writer = pa.ipc.new_stream(sink, part.schema)  # closing it ends the stream, not the sink
        writer.write_table(part)
        writer.close()
        ranges.append((first, sink.tell()))


def _own_dictionaries(part: pa.Table) -> pa.Table:
    """``part`` with each dictionary column's dictionary cut to the values its rows use: a slice keeps
    its table's whole dictionary (every account of a read unit), which each segment's stream would
    otherwise carry again."""
    for i, field in enumerate(part.schema):
        if not pa.types.is_dictionary(field.type):
            continue
        column = part.column(i).combine_chunks()
        if len(column.dictionary) <= len(column):
            continue
        indices = column.indices
        codes = indices.fill_null(0).to_numpy() if indices.null_count else indices.to_numpy()
        used, inverse = np.unique(codes, return_inverse=True)
        mask = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
        cut = pa.DictionaryArray.from_arrays(
            pa.array(inverse.astype(codes.dtype, copy=False), indices.type, mask=mask),
            column.dictionary.take(pa.array(used)),
            ordered=field.type.ordered,
        )
        part = part.set_column(i, field, cut)
    return part


def read_ipc_segment(path: str, first: int, end: int) -> pa.Table:
    """The segment at bytes [first, end) of a ``write_ipc_segments`` file, read into memory in one read
    (not mapped: a mapping would keep every page a run touched counted as the process's memory)."""
    return _stream(_read_range(path, first, end), path)


def read_ipc_segments(segments: Iterable[Segment]) -> list[pa.Table]:
    """Many segments, in order. An object store's are read as few ranges as they allow: segments that
    follow one another in one object are one request (a request costs the server and the client about
    what reading a megabyte does), eight requests at a time (each mostly waits on the server)."""
    segments = list(segments)
    if len(segments) < 2 or all(is_local(path) for path, _, _ in segments):
        return [read_ipc_segment(*segment) for segment in segments]
    ranges, range_of = _coalesced(segments)
    with ThreadPoolExecutor(max_workers=8) as pool:
        with _OPENED_LOCK:
            unopened = {p for p, _, _ in ranges if objects.handles(p) and p not in _OPENED}
        list(pool.map(_opened, unopened))  # each object once, before its ranges are read at once
        data = [pa.py_buffer(read) for read in pool.map(lambda r: _read_range(*r), ranges)]
    tables = []
    for path, first, end in segments:
        i = range_of[(path, first)]
        tables.append(_stream(data[i].slice(first - ranges[i][1], end - first), path))
    return tables


def _coalesced(segments: list[Segment]) -> tuple[list[Segment], dict[tuple[str, int], int]]:
    """The byte ranges that cover ``segments`` (each run of segments that follow one another in one
    object, one's end the next one's first byte, merged into one range) and each segment's range."""
    ranges: list[list[Any]] = []
    range_of: dict[tuple[str, int], int] = {}
    for path, first, end in sorted(set(segments)):
        if ranges and ranges[-1][0] == path and ranges[-1][2] == first:
            ranges[-1][2] = end
        else:
            ranges.append([path, first, end])
        range_of[(path, first)] = len(ranges) - 1
    return [(path, first, end) for path, first, end in ranges], range_of


def in_batches(items: Iterable[T], size_of: Callable[[T], int], budget: int) -> Iterator[list[T]]:
    """``items`` in order, in batches of at most ``budget`` bytes by ``size_of`` (a larger item alone):
    what a reader holds at once when it reads each batch's segments with ``read_ipc_segments``."""
    batch: list[T] = []
    size = 0
    for item in items:
        length = size_of(item)
        if batch and size + length > budget:
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += length
    if batch:
        yield batch


# Bytes of segments read at once from an object store where a reader can choose (dedup's sub-shards, the
# meter's join of spilled days): many ranges in flight and few requests, memory still bounded.
READ_BATCH_BYTES = 64 << 20


def _stream(data: pa.Buffer, path: str) -> pa.Table:
    try:
        return pa.ipc.open_stream(data).read_all()
    except pa.ArrowInvalid as exc:
        raise UsageBillingError(f"{path}: not a spill segment ({exc})") from None


# Objects opened for ranged reads, by path: opening one asks the server its size (a HEAD request),
# once per object and process rather than once per segment. An object written again under the same
# name (a run retried with its run id) is opened again when a range passes the size first seen.
_OPENED: dict[str, pa.NativeFile] = {}
_OPENED_LOCK = threading.Lock()
_OPENED_MAX = 4096


def _read_range(path: str, first: int, end: int) -> bytes | pa.Buffer:
    if is_local(path):
        with pa.OSFile(path) as source:
            return source.read_at(end - first, first)
    if not objects.handles(path):  # another of Beam's file systems: seek and read
        with open_object(path) as handle:
            handle.seek(first)
            return pa.py_buffer(handle.read(end - first))
    source = _opened(path)
    if end > source.size():  # written again, longer, since it was opened (a rerun's spill of one name)
        source = _opened(path, again=True)
    return source.read_at(end - first, first)


def _opened(path: str, again: bool = False) -> pa.NativeFile:
    """The object opened for ranged reads (its size asked once); ``again``: asked anew. A range read
    returns the object's bytes as they are now: only a size learned earlier can be out of date."""
    with _OPENED_LOCK:
        source = None if again else _OPENED.get(path)
    if source is None:
        source = objects.open_input(path)
        with _OPENED_LOCK:
            if len(_OPENED) >= _OPENED_MAX:
                _OPENED.clear()
            _OPENED[path] = source
    return source


class IpcSegments:
    """Segments of many spill files read one after another (``read_ipc_segment`` for each, without
    opening a file again per segment): local files are memory-mapped and kept open, at most ``OPEN``
    at a time. Use as a context manager."""

    OPEN = 256

    def __init__(self) -> None:
        self._maps: dict[str, pa.MemoryMappedFile] = {}

    def read(self, path: str, first: int, end: int) -> pa.Table:
        if not is_local(path):
            return read_ipc_segment(path, first, end)
        source = self._maps.get(path)
        if source is None:
            if len(self._maps) >= self.OPEN:
                self.close()
            source = self._maps[path] = pa.memory_map(path)
        # The rows may point into the mapping: Arrow keeps it mapped until they are gone, even after
        # close(); the caller concatenates them into a row group of its own soon after.
        return _stream(source.read_at(end - first, first), path)

    def close(self) -> None:
        for source in self._maps.values():
            source.close()
        self._maps.clear()

    def __enter__(self) -> IpcSegments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@io_errors
def write_npy(path: str, array: np.ndarray) -> None:
    if is_local(path):
        with local_atomic(path) as partial, open(partial, "wb") as handle:
            np.save(handle, array, allow_pickle=False)  # straight from the array: no copy in between
    else:
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        with create_object(path) as handle:
            handle.write(buf.getvalue())


def read_npy(path: str, mmap: bool = False) -> np.ndarray:
    """An array ``write_npy`` wrote; ``mmap`` maps a local file instead of reading it (a binary search
    then touches a few pages). The header is parsed here, not by ``np.load``: NumPy reads it with
    ``ast.literal_eval``, which CPython 3.11 can fail on when Beam's worker threads call it at the same
    time (``SystemError: AST constructor recursion depth mismatch``)."""
    if mmap and is_local(path):
        with open(path, "rb") as handle:
            dtype, shape, offset = _npy_header(handle.read(_NPY_PREFIX_MAX), path)
        if 0 in shape:  # nothing to map
            return np.empty(shape, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
    with open(path, "rb") if is_local(path) else open_object(path) as handle:
        data = handle.read()
    dtype, shape, offset = _npy_header(data, path)
    count = int(np.prod(shape, dtype=np.int64))
    if len(data) < offset + count * dtype.itemsize:
        raise UsageBillingError(f"{path}: truncated array file ({len(data)} bytes)")
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)


_NPY_MAGIC = b"\x93NUMPY"
_NPY_PREFIX_MAX = 1 << 16
_NPY_FIELD = {
    "descr": re.compile(r"'descr':\s*'([<>|=]?[a-zA-Z]\d*)'"),
    "fortran_order": re.compile(r"'fortran_order':\s*(True|False)"),
    "shape": re.compile(r"'shape':\s*\(([\d,\s]*)\)"),
}


def _npy_header(data: bytes, path: str) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, data offset) of an .npy file's header; only the plain arrays ``write_npy``
    writes (one simple dtype, C order), anything else a one-line error."""
    if data[:6] != _NPY_MAGIC or len(data) < 10:
        raise UsageBillingError(f"{path}: not a NumPy array file")
    major = data[6]
    size, start = (
        (int.from_bytes(data[8:10], "little"), 10)
        if major == 1
        else (int.from_bytes(data[8:12], "little"), 12)
    )
    header = data[start : start + size].decode("latin1")
    descr, order, shape_of = (_NPY_FIELD[name].search(header) for name in ("descr", "fortran_order", "shape"))
    if descr is None or order is None or shape_of is None or order.group(1) == "True":
        raise UsageBillingError(f"{path}: unexpected NumPy header {header.strip()!r}")
    dims = [part.strip() for part in shape_of.group(1).split(",")]
    shape = tuple(int(part) for part in dims if part)
    return np.dtype(descr.group(1)), shape, start + size
