"""Customer documents as PDF: WeasyPrint draws the HTML of ``pipelines.invoicing.customer``.

WeasyPrint needs Pango (Debian: libpango-1.0-0, libpangoft2-1.0-0) and a font; ``make system-deps``
installs them. A page takes WeasyPrint tens of milliseconds of one core, so many documents are drawn
by a pool of worker processes (one per core, up to 4), each writing its own files.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from itertools import chain, islice
from pathlib import Path

from pipelines.errors import UsageBillingError
from pipelines.runtime.outputs import atomic

SERIAL_BELOW = 8  # fewer documents than this are drawn in this process (a pool costs a second to start)
CHUNK = 16


def _weasyprint():
    try:
        import weasyprint  # lazy: weasyprint
    except OSError as exc:  # its system libraries are missing
        raise UsageBillingError(
            f"cannot draw PDFs: WeasyPrint's system libraries are missing ({exc}); "
            "install Pango (`make system-deps`, or apt-get install libpango-1.0-0 libpangoft2-1.0-0)"
        ) from None
    return weasyprint


def _draw(jobs: list[tuple[str, str]]) -> int:
    weasyprint = _weasyprint()
    for page, target in jobs:
        with atomic(Path(target)) as tmp:  # whole or not at all
            weasyprint.HTML(string=page).write_pdf(tmp)
    return len(jobs)


def workers() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), 4))


def _chunks(jobs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    it = iter(jobs)
    while chunk := list(islice(it, size)):
        yield chunk


def write_pdfs(jobs: Iterable[tuple[str, Path]]) -> int:
    """Draw each (HTML, target path) as a PDF; returns how many were written. The jobs are taken as
    they come, a few chunks per worker in flight: the pages of a whole month are never all held."""
    todo = ((page, str(target)) for page, target in jobs)
    first = list(islice(todo, SERIAL_BELOW))
    if len(first) < SERIAL_BELOW or workers() == 1:
        return _draw(first) + sum(_draw(chunk) for chunk in _chunks(todo, CHUNK))
    _weasyprint()  # one clear error here rather than one per worker
    # spawn: a forked copy of a process with threads (Beam, Airflow) may hold their locks
    context = multiprocessing.get_context("spawn")
    written = 0
    with ProcessPoolExecutor(max_workers=workers(), mp_context=context) as pool:
        pending: set[Future[int]] = set()
        for chunk in _chunks(chain(first, todo), CHUNK):
            if len(pending) >= 3 * workers():
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                written += sum(f.result() for f in done)
            pending.add(pool.submit(_draw, chunk))
        written += sum(f.result() for f in pending)
    return written
