"""usage-billing notify: deliver the outbox, list it, send the dead again."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy import func, select

from pipelines.runtime.console import out, settings_of, warehouse_of
from schemas.warehouse import Notification

notify_app = typer.Typer(no_args_is_help=True, help="Notifications: deliver, list, retry.")
STATUSES = ("pending", "sent", "dead")


@notify_app.command("deliver")
def notify_deliver(
    ctx: typer.Context,
    max_seconds: Annotated[
        float, typer.Option("--max-seconds", min=1, help="stop taking new notifications after this long")
    ] = 300.0,
) -> None:
    """Send the pending notifications that are due: to USAGE_BILLING_WEBHOOK_URL (signed), else as
    JSON lines under <lake>/notifications/."""
    from pipelines.notify.deliver import deliver  # lazy: apache_beam

    settings = settings_of(ctx)
    d = deliver(warehouse_of(ctx), settings.lake, settings.notify, max_seconds)
    out.print(
        f"notify deliver ({d.sink}): {d.sent:,} sent, {d.failed:,} failed (retried later), {d.dead:,} dead, "
        f"{d.left:,} pending"
    )


@notify_app.command("list")
def notify_list(
    ctx: typer.Context,
    status: Annotated[
        str | None, typer.Option("--status", help="only these: pending, sent or dead", case_sensitive=False)
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=0, help="rows to show, newest first")] = 20,
) -> None:
    """How many notifications are pending, sent and dead (per type), then the newest of them."""
    if status is not None and status.lower() not in STATUSES:
        raise typer.BadParameter(f"must be one of {', '.join(STATUSES)}", param_hint="--status")
    n = Notification.__table__.c
    with warehouse_of(ctx).connect() as conn:
        counts = conn.execute(select(n.type, n.status, func.count()).group_by(n.type, n.status)).all()
        query = select(
            n.notification_id,
            n.type,
            n.account_id,
            n.status,
            n.attempts,
            n.next_attempt_at,
            n.last_error,
            n.created_at,
        )
        if status is not None:
            query = query.where(n.status == status.lower())
        rows = conn.execute(query.order_by(n.created_at.desc(), n.notification_id).limit(limit)).all()
    by_type: dict[str, dict[str, int]] = {}
    for type_, state, count in counts:
        by_type.setdefault(type_, {})[state] = count
    if not by_type:
        out.print("no notifications")
        return
    for type_, states in sorted(by_type.items()):
        out.print(f"{type_}: " + ", ".join(f"{states.get(s, 0):,} {s}" for s in STATUSES))
    for r in rows:
        after = f", next attempt {r.next_attempt_at}" if r.status == "pending" and r.attempts else ""
        error = f", last error: {r.last_error}" if r.last_error else ""
        out.print(
            f"{r.notification_id}  {r.type}  {r.account_id}  {r.status} after {r.attempts} "
            f"attempt(s){after}{error}",
            markup=False,
        )


@notify_app.command("retry")
def notify_retry(
    ctx: typer.Context,
    dead: Annotated[bool, typer.Option("--dead", help="the dead notifications (required)")] = False,
) -> None:
    """Make the dead notifications pending again, from a first attempt; `notify deliver` sends them."""
    if not dead:
        raise typer.BadParameter("say which: --dead", param_hint="--dead")
    from pipelines.notify.deliver import retry_dead  # lazy: apache_beam

    count = retry_dead(warehouse_of(ctx))
    out.print(f"{count:,} dead notifications pending again")
