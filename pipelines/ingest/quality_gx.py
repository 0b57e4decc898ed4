"""The data-quality suite run by great-expectations on many partitions at once.

Many partitions are validated in one GX run: their rows in one frame whose index is the partition's
position, so GX's unexpected rows say which partition they belong to, and their profiles (row count
against the same weekday's median, duration and success shares) in a frame of one row each. A
partition none of whose rows is unexpected passes a row check. A partition with unexpected rows of a
check that looks at more than one row at a time (uniqueness) is validated again on its own, so each
outcome is the one GX gives the partition alone.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import lake
from pipelines.runtime import compat
from pipelines.settings import quiet_great_expectations
from schemas.catalog import Catalog
from schemas.events import REQUIRED_FIELDS, TOKEN_FIELDS
from schemas.limits import MAX_TOKENS_LIMIT
from schemas.quality import (
    DURATION_SHARE,
    OK_SHARE,
    OUTCOME_SUITE_NAME,
    PROFILE_SUITE_NAME,
    RATIO_TO_MEDIAN,
    SUITE_NAME,
    VOLUME_CHECK,
    Check,
    build_suite,
    outcome_checks,
    partition_checks,
)

DEFAULT_VOLUME_FACTOR = 3.0
MIN_HISTORY = 2  # same-weekday partitions needed before volume is judged
BATCH_ROWS = 1_000_000  # rows of partitions validated in one GX run
CHUNK_ROWS = 1_000_000  # rows in one frame of the checks of one row at a time (a large partition: many)
ROW_COLUMNS = tuple(dict.fromkeys(("event_id", *REQUIRED_FIELDS, *TOKEN_FIELDS)))  # what the row checks read
PROFILE_SOURCE_COLUMNS = ("duration_ms", "status")  # what a profile is computed from
OUTCOME_ROW_COLUMNS = (
    "account_id",
    "task_id",
    "started_at",
    "completed_at",
    "outcome",
    "rework",
    "rework_ms",
)
COMPLETE = {"result_format": "COMPLETE", "return_unexpected_index_query": False}


@dataclass
class CheckOutcome:
    check: Check
    success: bool
    observed: str | None
    details: dict


@dataclass
class PartitionReport:
    day: dt.date
    rows: int
    outcomes: list[CheckOutcome] = field(default_factory=list)
    accepted: bool = False
    acceptances: list[dict] = field(default_factory=list)  # who, when, why, which checks

    @property
    def failed_errors(self) -> list[str]:
        return [o.check.name for o in self.outcomes if o.check.level == "error" and not o.success]

    @property
    def blocked(self) -> bool:
        return bool(self.failed_errors) and not self.accepted

    def blocked_for(self, dataset: str) -> bool:
        """A failed error-level check of that dataset's suite stops the date (not accepted): usage events
        stop aggregation and metering, task outcomes the week's effectiveness."""
        return self.blocked and any(
            o.check.dataset == dataset for o in self.outcomes if o.check.level == "error" and not o.success
        )

    @property
    def status(self) -> str:
        return "accepted" if self.accepted else ("FAILED" if self.failed_errors else "passed")


@dataclass(frozen=True)
class Part:
    """A partition to validate: its date, rows, and the same weekday's history (row counts)."""

    day: dt.date
    rows: int
    history: tuple[int, ...] = ()

    @property
    def median(self) -> float | None:
        return float(statistics.median(self.history)) if len(self.history) >= MIN_HISTORY else None


def footer_rows(files: list[str]) -> int:
    """Rows of a partition's files, from their Parquet footers (no data read)."""
    return sum(lake.open_parquet(f).metadata.num_rows for f in files)


def history(lake_root: str, day: dt.date, weeks: int, rows: dict[dt.date, int | None]) -> tuple[int, ...]:
    """Row counts of the partitions of the same weekday in the ``weeks`` before ``day`` (``rows``
    caches what was read: None for a date without a partition)."""
    out = []
    for k in range(1, weeks + 1):
        past = day - dt.timedelta(days=7 * k)
        if past not in rows:
            files = lake.list_files(lake.partition(lake_root, lake.EVENTS, past))
            rows[past] = footer_rows(files) if files else None
        found = rows[past]
        if found is not None:
            out.append(found)
    return tuple(out)


def volume_bounds(median: float | None, factor: float) -> tuple[float, float] | None:
    """(min, max) rows: the same weekday's trailing median divided / multiplied by ``factor``."""
    return None if median is None else (median / factor, median * factor)


class Gate:
    """One GX context with the suite's two validation definitions, reused for every batch of a run.
    ``outcomes``: the task outcomes' suite (row checks only) instead of the usage events'."""

    def __init__(
        self, catalog: Catalog, factor: float = DEFAULT_VOLUME_FACTOR, outcomes: bool = False
    ) -> None:
        quiet_great_expectations()
        import great_expectations as gx  # lazy: great_expectations
        from great_expectations.data_context.types.base import ProgressBarsConfig  # lazy: great_expectations

        compat.skip_gx_fingerprints()
        self.factor = factor
        self.suite = OUTCOME_SUITE_NAME if outcomes else SUITE_NAME
        self.checks = (
            outcome_checks()
            if outcomes
            else partition_checks(catalog.model_ids, MAX_TOKENS_LIMIT, factor, catalog.tier_ids)
        )
        self.row_checks = [c for c in self.checks if c.scope == "rows"]
        self.profile_checks = [c for c in self.checks if c.scope == "profile"]
        for c in self.row_checks:  # a row check's outcome per partition is its count of unexpected rows
            assert "mostly" not in c.kwargs, f"{c.name}: a share belongs in the partition profile"
        self.columns = sorted({col for c in self.row_checks for col in c.columns})
        known = OUTCOME_ROW_COLUMNS if outcomes else ROW_COLUMNS
        assert set(self.columns) <= set(known), "ROW_COLUMNS must name every column a row check reads"
        self._gx = gx
        self._ctx = gx.get_context(mode="ephemeral")
        self._ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        self._source = self._ctx.data_sources.add_pandas("lake")
        self._definitions: dict[tuple[str, ...], object] = {}
        self.local = [c for c in self.row_checks if c.row_local]  # of one row at a time
        self.whole = [c for c in self.row_checks if not c.row_local]  # of many rows at once
        for checks in (self.local, self.whole):
            if checks:
                self._definition(self.suite, checks)
        self.profile_definition = (
            self._definition(PROFILE_SUITE_NAME, self.profile_checks) if self.profile_checks else None
        )

    def _definition(self, name: str, checks: list[Check]):
        key = tuple(c.name for c in checks)
        if key not in self._definitions:
            asset = self._source.add_dataframe_asset(f"{name}-{len(self._definitions)}")
            suite = self._ctx.suites.add(build_suite(checks, f"{name}-{len(self._definitions)}"))
            self._definitions[key] = self._ctx.validation_definitions.add(
                self._gx.ValidationDefinition(
                    name=suite.name, data=asset.add_batch_definition_whole_dataframe("all"), suite=suite
                )
            )
        return self._definitions[key]

    def _run(self, definition, frame, result_format) -> dict[str, dict]:
        """check name -> GX result of that expectation on ``frame``."""
        result = definition.run(batch_parameters={"dataframe": frame}, result_format=result_format)
        return {
            r.expectation_config.meta["check"]: (r.result or {}) | {"_success": r.success}
            for r in result.results
        }

    def validate(self, table: pa.Table, day: dt.date, history: tuple[int, ...] = ()) -> PartitionReport:
        """One partition's report (``history``: the same weekday's previous row counts)."""
        return self.validate_many(table, [Part(day, table.num_rows, history)])[0]

    def validate_many(self, table: pa.Table, parts: list[Part]) -> list[PartitionReport]:
        """Reports of ``parts``, whose rows ``table`` holds one after the other in that order.

        The checks of one row at a time see at most ``CHUNK_ROWS`` rows per GX run, their unexpected
        rows added up in order; a check of many rows at once (uniqueness) sees the whole table, only
        the columns it reads: the memory of a large partition is one column's, not every column's."""
        assert table.num_rows == sum(p.rows for p in parts)
        position = np.repeat(np.arange(len(parts)), [p.rows for p in parts])
        outcomes: dict[str, list[CheckOutcome]] = {}
        local, whole = self.local, self.whole  # checks of one row at a time, of many rows at once
        if local:
            found: dict[str, tuple[list[int], list]] = {c.name: ([], []) for c in local}
            for start in range(0, table.num_rows, CHUNK_ROWS) or [0]:
                rows = slice(start, start + CHUNK_ROWS)
                frame = self._frame(table.slice(start, CHUNK_ROWS), position[rows], local)
                for name, result in self._unexpected(local, frame).items():
                    found[name][0].extend(result.get("unexpected_index_list") or [])
                    found[name][1].extend(result.get("unexpected_list") or [])
            for check in local:
                outcomes[check.name] = self._row_outcomes(check, *found[check.name], None, parts)
        if whole:
            frame = self._frame(table, position, whole)
            unexpected = self._unexpected(whole, frame)
            for check in whole:
                result = unexpected.get(check.name, {})
                where, values = result.get("unexpected_index_list") or [], result.get("unexpected_list") or []
                outcomes[check.name] = self._row_outcomes(check, where, values, frame, parts)
            del frame
        if self.profile_checks:
            for name, per in self._profile_outcomes(table, parts).items():
                outcomes[name] = per
        reports = []
        for i, part in enumerate(parts):
            report = PartitionReport(part.day, part.rows)
            report.outcomes = [outcomes[c.name][i] for c in self.checks]
            reports.append(report)
        return reports

    def _frame(self, table: pa.Table, position: np.ndarray, checks: list[Check]):
        """The columns ``checks`` read as a pandas frame whose index is each row's partition. Each column
        in one chunk: pandas keeps text as Arrow arrays, and every row selection GX makes (hundreds a
        frame) would otherwise join a column's chunks anew, a fresh copy of the text each time."""
        frame = table.select(sorted({col for c in checks for col in c.columns})).combine_chunks().to_pandas()
        frame.index = position
        return frame

    def _unexpected(self, checks: list[Check], frame) -> dict[str, dict]:
        """The GX result (every unexpected row) of each of ``checks`` that has unexpected rows in
        ``frame``: one summary run of them all, then a complete run of those it flagged."""
        summary = self._run(self._definition(self.suite, checks), frame, "SUMMARY")
        flagged = [c for c in checks if summary[c.name].get("unexpected_count")]
        if not flagged:
            return {}
        detail = self._run(self._definition(self.suite + "-detail", flagged), frame, COMPLETE)
        return {c.name: detail[c.name] for c in flagged}

    def _outcome(
        self, check: Check, success: bool, observed: str, unexpected: list, **more: object
    ) -> CheckOutcome:
        details = {
            "kwargs": check.kwargs,
            "expected": check.expected,
            "partial_unexpected_list": unexpected[:5],
        }
        return CheckOutcome(check, success, observed[:400], cast(dict, _plain(details | more)))

    def _row_outcomes(
        self, check: Check, where_list: list, values: list, frame, parts: list[Part]
    ) -> list[CheckOutcome]:
        """Per partition, the outcome of ``check`` from its unexpected rows (their partitions, in row
        order, and values); a check of many rows (``frame``: the rows it saw) judges a partition with
        unexpected rows again on that partition alone."""
        where = np.asarray(where_list, dtype=np.int64)
        counts = np.bincount(where, minlength=len(parts))
        out = []
        for i, part in enumerate(parts):
            n = int(counts[i])
            if n and not check.row_local:  # uniqueness: judged on the partition alone
                alone = self._run(
                    self._definition(self.suite + "-alone", [check]), frame[frame.index == i], "SUMMARY"
                )
                r = alone[check.name]
                n = int(r.get("unexpected_count") or 0)
                out.append(
                    self._outcome(check, bool(r["_success"]), str(n), r.get("partial_unexpected_list") or [])
                )
                continue
            mine = [values[k] for k in np.flatnonzero(where == i)[:5] if k < len(values)] if n else []
            out.append(self._outcome(check, n == 0, str(n), mine, unexpected_percent=100 * n / part.rows))
        return out

    def _profile_outcomes(self, table: pa.Table, parts: list[Part]) -> dict[str, list[CheckOutcome]]:
        import pandas as pd  # lazy: pandas

        ends = np.cumsum([p.rows for p in parts])
        starts = ends - np.array([p.rows for p in parts])

        def share(mask: pa.ChunkedArray) -> np.ndarray:
            hits = np.concatenate([[0], np.cumsum(mask.to_numpy(zero_copy_only=False).astype(np.int64))])
            rows = np.maximum(ends - starts, 1)
            return (hits[ends] - hits[starts]) / rows

        medians = [p.median for p in parts]
        profile = pd.DataFrame(
            {
                RATIO_TO_MEDIAN: [p.rows / m if m else None for p, m in zip(parts, medians, strict=True)],
                DURATION_SHARE: share(pc.is_valid(table["duration_ms"])),
                OK_SHARE: share(pc.fill_null(pc.equal(table["status"], "ok"), False)),
            },
            index=np.arange(len(parts)),
        ).astype("float64")
        result = self._run(self.profile_definition, profile, COMPLETE)
        out: dict[str, list[CheckOutcome]] = {}
        for check in self.profile_checks:
            failed = set(int(i) for i in result[check.name].get("unexpected_index_list") or [])
            column = check.kwargs["column"]
            per = []
            for i, part in enumerate(parts):
                value = profile[column].iloc[i]
                if check.name == VOLUME_CHECK:
                    bounds = volume_bounds(medians[i], self.factor)
                    observed = f"{part.rows:,} rows" + (
                        "" if bounds else " (not judged: fewer than 2 partitions of the same weekday before)"
                    )
                    more = {
                        "bounds": bounds,
                        "median": medians[i],
                        "history": list(part.history),
                        "rows": part.rows,
                    }
                else:
                    observed, more = f"{value:.1%} of {part.rows:,} rows", {}
                per.append(self._outcome(check, i not in failed, observed, [], value=value, **more))
            out[check.name] = per
        return out


def _plain(value: object) -> object:
    """JSON-safe: strict JSON has no NaN or infinity (PostgreSQL refuses them), so they become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    return _plain(json.loads(json.dumps(value, default=str)))
