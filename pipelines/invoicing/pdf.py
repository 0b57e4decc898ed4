"""Customer documents as PDF: WeasyPrint draws the HTML of ``pipelines.invoicing.customer``.

WeasyPrint needs Pango (Debian: libpango-1.0-0, libpangoft2-1.0-0) and a font; ``make system-deps``
installs them. A page takes WeasyPrint tens of milliseconds of one core, so many documents are drawn
by a pool of worker processes (one per core, up to 4), each writing its own files.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pipelines.errors import UsageBillingError

SERIAL_BELOW = 8  # fewer documents than this are drawn in this process (a pool costs a second to start)
CHUNK = 16


def _weasyprint():  # type: ignore[no-untyped-def]
    try:
        import weasyprint
    except OSError as exc:  # its system libraries are missing
        raise UsageBillingError(
            f"cannot draw PDFs: WeasyPrint's system libraries are missing ({exc}); "
            "install Pango (`make system-deps`, or apt-get install libpango-1.0-0 libpangoft2-1.0-0)"
        ) from None
    return weasyprint


def _draw(jobs: list[tuple[str, str]]) -> int:
    weasyprint = _weasyprint()
    for page, target in jobs:
        weasyprint.HTML(string=page).write_pdf(target)
    return len(jobs)


def workers() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), 4))


def write_pdfs(jobs: Iterable[tuple[str, Path]]) -> int:
    """Draw each (HTML, target path) as a PDF; returns how many were written."""
    todo = [(page, str(target)) for page, target in jobs]
    if len(todo) < SERIAL_BELOW or workers() == 1:
        return _draw(todo)
    _weasyprint()  # one clear error here rather than one per worker
    chunks = [todo[i : i + CHUNK] for i in range(0, len(todo), CHUNK)]
    # spawn: a forked copy of a process with threads (Beam, Airflow) may hold their locks
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers(), mp_context=context) as pool:
        return sum(pool.map(_draw, chunks))
