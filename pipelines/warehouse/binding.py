"""Which lake a warehouse is built from, so that no step replaces stored results with another lake's.

A lake knows its identity: ``_lake.json`` holds a ``lake_id`` (a uuid written when the lake is
created). The warehouse knows which lake it was built from: ``lake_bindings``, newest row in force.
Every step that reads or writes the lake calls ``require_lake`` first; pointed at another lake, a
missing or an emptied one, it refuses with one line naming both and changes nothing. The first step
on an unbound warehouse binds it; a moved lake is re-pointed deliberately with ``usage-billing lake
rebind --reason ...``, which records who, when, why and from where.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, func, insert, select

from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.warehouse.locks import step_lock
from schemas.warehouse import IngestRun, LakeBinding, UsageDaily


@dataclass(frozen=True)
class Binding:
    lake_id: str
    lake_path: str
    bound_at: dt.datetime


def where(lake_root: str) -> str:
    """The lake's location as recorded: a local path absolute with links resolved, a URL as given."""
    if lake.is_local(lake_root):
        return os.path.realpath(os.path.expanduser(lake_root.removeprefix("file://")))
    return lake_root.rstrip("/")


def _recorded(engine: Engine) -> Binding:
    """The binding a step has just recorded."""
    found = current(engine)
    if found is None:
        raise UsageBillingError("the lake binding just recorded is not in the warehouse")
    return found


def current(engine: Engine) -> Binding | None:
    b = LakeBinding.__table__.c
    with engine.connect() as conn:
        row = conn.execute(
            select(b.lake_id, b.lake_path, b.bound_at).order_by(b.bound_at.desc()).limit(1)
        ).first()
    return Binding(row.lake_id, row.lake_path, row.bound_at) if row else None


def _record(engine: Engine, lake_id: str, lake_root: str, reason: str) -> None:
    by = f"{getpass.getuser()}@{socket.gethostname()}"[:200]
    with engine.begin() as conn:
        conn.execute(
            insert(LakeBinding.__table__).values(
                bound_at=dt.datetime.now(dt.UTC),
                lake_id=lake_id,
                lake_path=where(lake_root),
                bound_by=by,
                reason=reason[:1000],
            )
        )


def _identity(engine: Engine, lake_root: str, locked: bool = False) -> str | None:
    """The lake's id; a lake made before ids existed gets one now, under the ingest lock (``locked``:
    the caller holds it already)."""
    meta = lake.lake_meta(lake_root)
    if meta is None:
        return None
    if meta.get("lake_id"):
        return str(meta["lake_id"])
    with contextlib.nullcontext() if locked else step_lock(engine, lake.ingest_lock(lake_root)):
        meta = lake.lake_meta(lake_root) or meta
        if not meta.get("lake_id"):
            meta = {**meta, "lake_id": str(uuid.uuid4())}
            lake.write_json(lake.join(lake_root, lake.META_FILE), meta)
    return str(meta["lake_id"])


def _ingested_rows(engine: Engine) -> int:
    """Usage events the warehouse has ingested into its lake (task outcomes have their own dataset)."""
    runs = select(func.coalesce(func.sum(IngestRun.clean), 0)).where(IngestRun.dataset == "events")
    with engine.connect() as conn:
        return int(conn.execute(runs).scalar_one())


def require_lake(
    engine: Engine,
    lake_root: str,
    step: str,
    create: Callable[[], object] | None = None,
    bind: bool = True,
) -> Binding:
    """The warehouse's binding, after checking that ``lake_root`` is its lake (binding an unbound
    warehouse, unless ``bind`` is false: a step that writes nothing, such as a preview, refuses an
    unbound warehouse instead). ``create`` makes a new lake where there is none, for the one step that
    may (ingest, which holds the ingest lock while it calls this)."""
    bound = current(engine)
    locked = create is not None
    lake_id = _identity(engine, lake_root, locked)
    if lake_id is None:
        if bound is not None:
            raise UsageBillingError(
                f"{step}: there is no lake at {where(lake_root)} (no {lake.META_FILE}), but this "
                f"warehouse was built from lake {bound.lake_id} at {bound.lake_path}; check --lake or "
                "USAGE_BILLING_LAKE (if the lake moved, run `usage-billing lake rebind --reason ...` "
                "at its new place); nothing changed"
            )
        if create is None:
            raise UsageBillingError(
                f"{step}: there is no lake at {where(lake_root)} (no {lake.META_FILE}); ingest a landing "
                "date first, or point --lake or USAGE_BILLING_LAKE at the lake"
            )
        create()
        lake_id = _identity(engine, lake_root, locked)
        assert lake_id is not None
    if bound is None and not bind:
        raise UsageBillingError(
            f"{step}: this warehouse has not read a lake yet (no step has ingested into it); run "
            "`usage-billing run-day` or `events ingest` first"
        )
    if bound is None:
        _record(engine, lake_id, lake_root, f"first bound by {step}")
        return _recorded(engine)
    if lake_id != bound.lake_id:
        raise UsageBillingError(
            f"{step}: the lake at {where(lake_root)} is lake {lake_id}, but this warehouse was built "
            f"from lake {bound.lake_id} at {bound.lake_path}; check --lake or USAGE_BILLING_LAKE "
            "(to use this lake on purpose, run `usage-billing lake rebind --reason ...`); nothing changed"
        )
    if where(lake_root) != bound.lake_path:
        raise UsageBillingError(
            f"{step}: lake {lake_id} is at {where(lake_root)}, but this warehouse recorded it at "
            f"{bound.lake_path}; if it moved, record the move with `usage-billing lake rebind --reason ...`; "
            "nothing changed"
        )
    if not lake.partition_dates(lake_root, lake.EVENTS) and _ingested_rows(engine) > 0:
        raise UsageBillingError(
            f"{step}: lake {lake_id} at {where(lake_root)} holds no events partition, but this warehouse "
            "ingested rows into it: the lake was emptied or is a copy of its metadata only; nothing changed"
        )
    return bound


def rebind(engine: Engine, lake_root: str, reason: str) -> tuple[Binding | None, Binding]:
    """Point the warehouse at the lake at ``lake_root`` on purpose; returns (before, after)."""
    if not reason.strip():
        raise UsageBillingError("a rebind needs a --reason (it is recorded with who and when)")
    lake_id = _identity(engine, lake_root)
    if lake_id is None:
        raise UsageBillingError(
            f"there is no lake at {where(lake_root)} (no {lake.META_FILE}): nothing to bind to"
        )
    with step_lock(engine, lake.ingest_lock(lake_root)):  # not while an ingest runs there
        before = current(engine)
        moved = f"from lake {before.lake_id} at {before.lake_path}" if before else "from no lake"
        _record(engine, lake_id, lake_root, f"lake rebind {moved}: {reason.strip()}")
    return before, _recorded(engine)


def require_partitions(engine: Engine, lake_root: str, dates: list[dt.date], step: str) -> None:
    """A lake partition is never removed by the pipeline: a UTC date whose partition is missing while
    usage_daily holds rows of it means the lake is not what the warehouse was built from (or lost a
    partition). Refuse before anything is replaced, naming the first such date."""
    committed = set(lake.partition_dates(lake_root, lake.EVENTS))
    missing = [d for d in dates if d not in committed]
    if not missing:
        return
    u = UsageDaily.__table__.c
    with engine.connect() as conn:
        stored = conn.execute(
            select(u.day, func.count()).where(u.day.in_(missing)).group_by(u.day).order_by(u.day).limit(1)
        ).first()
    if stored is not None:
        raise UsageBillingError(
            f"{step}: the lake at {where(lake_root)} has no events partition for {stored[0]}, but "
            f"usage_daily holds {stored[1]:,} rows of it; a lake partition is never removed, so this "
            "lake is not the one these rows came from (or a partition was deleted); nothing changed"
        )
