"""The calendar of billing, in one place: an event's account-local date (``local_dates``), pool periods
of local dates (day, ISO week from Monday, calendar month) for numpy arrays of dates and for single
dates, and how far pool periods couple balances across their boundaries (``Coupling``).

Pool periods and invoice months are evaluated in the account's timezone, so the dates given to the
period functions are already local; a week is ISO (it starts on Monday).
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.catalog import Catalog
from schemas.events import TIMESTAMP

EPOCH = np.datetime64("1970-01-01", "D")  # a Thursday


def weekday(days: np.ndarray) -> np.ndarray:
    """ISO day of the week of each date, 0 = Monday .. 6 = Sunday."""
    return ((days.astype("datetime64[D]") - EPOCH).astype(np.int64) + 3) % 7


def period_start(day: np.ndarray, period: str) -> np.ndarray:
    """Start of the pool period holding each local date: the day, its ISO week's Monday, its month."""
    if period == "day":
        return day
    if period == "week":
        return np.asarray(day - weekday(day))
    if period == "month":
        return day.astype("datetime64[M]").astype("datetime64[D]")
    raise ValueError(f"unknown period {period!r}")


def period_end(start: np.ndarray, period: str) -> np.ndarray:
    """Last local date of each period (inclusive)."""
    if period == "day":
        return start
    if period == "week":
        return start + 6
    return (start.astype("datetime64[M]") + 1).astype("datetime64[D]") - 1


def day_period(day: dt.date, period: str) -> tuple[dt.date, dt.date]:
    """(first, last) local date of the pool period holding ``day``."""
    start = period_start(np.array([day], dtype="datetime64[D]"), period)
    return start[0].item(), period_end(start, period)[0].item()


def monday(day: dt.date) -> dt.date:
    """The Monday of the ISO week holding ``day``."""
    return day - dt.timedelta(days=day.weekday())


QUARTER_HOUR_US = 15 * 60 * 1_000_000


DAY_US = 86_400 * 1_000_000


MAX_OFFSET_CELLS = 4_000_000  # zones x quarter hours of offsets looked up at once (two int64 each)


def local_dates(event_time: pa.Array | pa.ChunkedArray, timezone: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The account-local calendar date of each UTC timestamp.

    Each zone's UTC offset is looked up (Arrow's tz database) once per quarter hour of the events'
    time span, at its first and last microsecond, not once per event: offsets and their changes lie
    on quarter hours, and where one does not (the two lookups differ) the events of that quarter hour
    are converted one by one. The same dates as ``_local_dates_per_event``, about 6x faster (1.3M
    events of 10 zones: 0.18 -> 0.03 s).
    """
    times = event_time.combine_chunks() if isinstance(event_time, pa.ChunkedArray) else event_time
    zones = timezone.combine_chunks() if isinstance(timezone, pa.ChunkedArray) else timezone
    if len(times) == 0 or times.null_count or zones.null_count:
        return _local_dates_per_event(times, zones)
    us = times.cast(TIMESTAMP).cast(pa.int64()).to_numpy()  # UTC microseconds whatever the unit given
    quarter = us // QUARTER_HOUR_US
    first = int(quarter.min())
    encoded = pc.dictionary_encode(zones)
    names = encoded.dictionary.to_pylist()
    span = int(quarter.max()) - first + 1
    if span * len(names) > MAX_OFFSET_CELLS:  # years of events at once: convert them one by one
        return _local_dates_per_event(times, zones)
    starts = (first + np.arange(span, dtype=np.int64)) * QUARTER_HOUR_US
    offset = np.stack([_offsets(starts, zone) for zone in names])
    changes = offset != np.stack([_offsets(starts + QUARTER_HOUR_US - 1, zone) for zone in names])
    code, cell = encoded.indices.to_numpy(), quarter - first
    per_event = offset[code, cell]
    exact = changes[code, cell]
    if exact.any():
        per_event[exact] = _offsets_per_zone(us[exact], code[exact], names)
    return np.asarray(((us + per_event) // DAY_US).astype("datetime64[D]"))


def zone_problem(zone: str) -> str | None:
    """Why ``zone`` cannot be an account's timezone (None when it can): every stage must be able to
    use it, Python's zoneinfo (documents, plan periods) and Arrow's tz database (metering) alike, and
    both must agree on its offsets (``posix/...`` and ``right/...`` names pass the first and not the
    second; ``right/`` zones count leap seconds)."""
    if not zone or zone != zone.strip() or "\x00" in zone:
        return "is not an IANA name"
    try:
        info = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return "is not an IANA name"
    probes = np.array([0, 946_684_800, 1_782_864_000, 4_102_444_800], dtype=np.int64) * 1_000_000
    try:
        arrow = _offsets(probes, zone)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowKeyError):
        return "is not in the tz database metering uses"
    python = [
        int(
            (
                dt.datetime.fromtimestamp(int(p) // 1_000_000, info).utcoffset() or dt.timedelta()
            ).total_seconds()
        )
        for p in probes
    ]
    python = [seconds * 1_000_000 for seconds in python]
    if arrow.tolist() != python:
        return "has offsets that differ between the tz databases the stages use"
    return None


def _offsets_per_zone(us: np.ndarray, code: np.ndarray, names: list[str]) -> np.ndarray:
    """UTC offset of each instant in its zone (``names[code]``), one Arrow conversion per zone."""
    out = np.empty(len(us), np.int64)
    for i in np.unique(code).tolist():
        at = code == i
        out[at] = _offsets(us[at], names[i])
    return out


def _offsets(us: np.ndarray, zone: str) -> np.ndarray:
    """UTC offset (microseconds) of ``zone`` at each UTC instant."""
    local = pc.local_timestamp(pa.array(us, pa.timestamp("us", tz=zone)))
    return np.asarray(local.cast(pa.int64()).to_numpy() - us)


def _local_dates_per_event(times: pa.Array, zones: pa.Array) -> np.ndarray:
    """``local_dates`` converting every event (one Arrow conversion per distinct zone)."""
    out = np.empty(len(times), dtype="datetime64[D]")
    for zone in pc.unique(zones).to_pylist():
        mask = pc.equal(zones, zone)
        local = pc.local_timestamp(times.filter(mask).cast(pa.timestamp("us", tz=zone)))
        out[np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)] = (
            pc.cast(local, pa.date32()).to_numpy(zero_copy_only=False).astype("datetime64[D]")
        )
    return out


class Coupling:
    """How far back and forward pool balances reach, for one catalog.

    A pool covers what the pools before it in draw order left of an event, so its balance depends on
    theirs, and theirs on every event of their own periods. Periods that do not line up (a weekly pool
    beside a monthly one) couple balances across period boundaries: the balance of March's monthly
    pool depends on the week that holds March 1, which began in February; drawn the other way round,
    the week of Feb 23 depends on February's month. Two pools couple only where a model is eligible
    for both. Per plan and pool ``k`` in draw order, with ``s_k``/``e_k`` the start/end of ``k``'s period
    holding a day:

    - ``depends_from(d)``: E_k(d) = min(s_k(d), E_j(s_k(d)) for coupled j before k), the earliest day
      whose events the balances in force on ``d`` depend on (a metering run must read from there);
    - ``affects_until(d)``: G_k(d) = max(e_k(d), G_j(e_k(d)) for coupled j after k), the last day whose
      balances an event of ``d`` can change (metered days up to there must be metered again with it).

    Both are monotone in ``d``; they cost a few steps per pool, never a look at the events.
    """

    def __init__(self, catalog: Catalog) -> None:
        models = catalog.model_ids
        self.plans: list[tuple[list[str], list[list[int]]]] = []
        for plan in catalog.plans:
            pools = plan.pools_in_draw_order()
            coupled = [
                [
                    j
                    for j in range(len(pools))
                    if j != k and any(pools[j].covers(m) and p.covers(m) for m in models)
                ]
                for k, p in enumerate(pools)
            ]
            self.plans.append(([p.period for p in pools], coupled))

    def depends_from(self, day: dt.date) -> dt.date:
        return min([day, *(self._reach(p, k, day, -1, {}) for p in self.plans for k in range(len(p[0])))])

    def affects_until(self, day: dt.date) -> dt.date:
        return max([day, *(self._reach(p, k, day, 1, {}) for p in self.plans for k in range(len(p[0])))])

    def _reach(
        self,
        plan: tuple[list[str], list[list[int]]],
        k: int,
        day: dt.date,
        way: int,
        seen: dict[tuple[int, dt.date], dt.date],
    ) -> dt.date:
        """E_k(day) (``way`` -1) or G_k(day) (``way`` 1) for one plan's (periods, coupled)."""
        if (k, day) not in seen:
            periods, coupled = plan
            edge = day_period(day, periods[k])[0 if way < 0 else 1]
            further = [self._reach(plan, j, edge, way, seen) for j in coupled[k] if (j - k) * way > 0]
            seen[k, day] = min([edge, *further]) if way < 0 else max([edge, *further])
        return seen[k, day]
