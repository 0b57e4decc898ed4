"""``usage-billing demo``: the whole pipeline on generated data, with the embedded defaults.

Generates the scenario (2026-02-01 .. 2026-09-30 by default, about 2.2M events), loads the accounts,
ingests every landing date in one pipeline run, gates, aggregates and meters the whole range,
computes the effectiveness of every week, invoices every month (the last stays open), exports
August's documents (CSV, Parquet, HTML), writes the effectiveness and retirement reports, prints a
summary (``demo_summary``) and ends with what it wrote and the time per step. It runs the same step
functions as ``run-day`` (``jobs/run_day.py``) on a new warehouse and new folders, and refuses ones
that hold data it did not create.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from sqlalchemy import Engine, select

import migrations
from pipelines import lake
from pipelines.adoption.candidate import contacts_file
from pipelines.adoption.html import preview_lines
from pipelines.adoption.retirement import run as retirement_report
from pipelines.effectiveness import report as effectiveness_report
from pipelines.effectiveness.report import EffectivenessReport
from pipelines.errors import UsageBillingError
from pipelines.ingest.options import IngestFlags
from pipelines.ingest.quality_pages import index_path
from pipelines.invoicing import documents as invoicing
from pipelines.invoicing.export import export
from pipelines.jobs import demo_notify
from pipelines.jobs import demo_summary as summary
from pipelines.jobs.chain import DAILY, run_chain
from pipelines.jobs.demo_credits import DemoCredits, month_after, starting_grants, transition_grants
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.jobs.steps import DayState
from pipelines.notify.deliver import deliver
from pipelines.runtime.context import RunContext, split_argv
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import (
    check_connection,
    make_engine,
    redact,
    sqlite_file,
    upgrade,
    warehouse_engine,
)
from schemas.warehouse import Invoice

MARKER = ".usage-billing-demo"
START = dt.date(2026, 2, 1)


def _check_folder(folder: str) -> None:
    """Refuse a folder that is not local or holds data the demo did not make."""
    if not lake.is_local(folder):
        raise UsageBillingError(f"the demo runs on local folders only, not {folder}")
    if os.path.isdir(folder) and os.listdir(folder) and not os.path.exists(os.path.join(folder, MARKER)):
        raise UsageBillingError(
            f"{folder} holds data the demo did not create; point --lake/--landing elsewhere"
        )


def _reset(folder: str) -> None:
    """Empty a demo folder (checked by ``_check_folder`` first)."""
    _check_folder(folder)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    open(os.path.join(folder, MARKER), "w").close()


def _reset_warehouse(settings: Settings) -> None:
    """Start the demo on a new warehouse: remove a SQLite file the demo made before (a marker file
    beside it says so); refuse one that holds anything else, and any server database that is
    already in use."""
    engine = make_engine(settings.database_url)
    path = sqlite_file(engine)
    try:
        if path is None:
            if _in_use(engine):
                raise UsageBillingError(
                    f"the warehouse {redact(settings.database_url)} is in use; the demo needs a new one"
                )
            return
    finally:
        engine.dispose()
    marker = path.with_name(f".{path.name}{MARKER}")
    if path.exists() and not marker.exists():
        raise UsageBillingError(
            f"the warehouse {path} holds data the demo did not create; point --database-url elsewhere"
        )
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def _in_use(engine: Engine) -> bool:
    check_connection(engine)
    return migrations.current(engine) is not None


STEPS = (
    "warehouse schema",
    "generate events",
    "load accounts",
    *(step.name for step in DAILY),
    "invoices",
    "invoice exports",
    "effectiveness report",
    "retirement report",
)
# The demo's days hold about 9,000 events: 2 dedup shards (files per day) instead of the default 8,
# which is sized for days of millions. A lake's shard count is fixed when it is created.
DEMO_SHARDS = 2
FAST_MODEL = "gpt-5.3-codex-spark"  # the scenario's fast model: its head-to-head is printed
REPORT_AS_OF = dt.date(2026, 8, 24)  # the week the fast model's retirement was weighed, in the scenario


def run_demo(
    settings: Settings,
    *,
    days: int,
    accounts: int,
    events_per_day: int,
    seed: int,
    beam_args: list[str],
    out: Console,
    err: Console,
) -> None:
    began = time.perf_counter()
    catalog = settings.catalog
    cfg = GeneratorConfig(start=START, days=days, accounts=accounts, events_per_day=events_per_day, seed=seed)
    dates = [cfg.start + dt.timedelta(days=i) for i in range(days)]
    engine = warehouse_engine(settings)
    timings: dict[str, float] = {}
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,  # on a terminal the bar goes away; the summary at the end says what ran
        disable=not err.is_terminal,
    )
    with progress:
        overall = progress.add_task("demo", total=len(STEPS))
        clock: dict[str, Any] = {"name": "", "since": time.perf_counter()}

        def step(name: str) -> None:
            now = time.perf_counter()
            if clock["name"]:
                timings[clock["name"]] = now - clock["since"]
                progress.advance(overall)
            clock.update(name=name.split(" (")[0], since=now)
            progress.update(overall, description=f"demo: {name}")

        step(STEPS[0])
        for folder in (settings.landing, settings.lake, settings.exports, settings.reports):
            _check_folder(folder)
        _reset_warehouse(settings)
        upgrade(engine)
        step(STEPS[1])
        for folder in (settings.landing, settings.lake, settings.exports, settings.reports):
            _reset(folder)
        gen = generate(catalog, cfg)
        write_landing(gen, cfg, settings.landing)
        step(STEPS[2])
        load_accounts(engine, Path(settings.landing) / "accounts.csv", catalog)
        # the daily chain on every landing date at once, with a lake of few dedup shards
        _, flags, beam_args = split_argv(beam_args, IngestFlags)
        shards = flags.shards or DEMO_SHARDS
        with RunContext.open(settings, beam_args) as context:
            day = run_chain(DAILY, context, DayState(landing=tuple(dates), shards=shards), step)
        result, reports = day.ingested, list(day.reports)
        if result is None:  # the chain's first step runs the ingest
            raise UsageBillingError("the demo's daily chain did not ingest")
        step(STEPS[3 + len(DAILY)])
        months = sorted({d.strftime("%Y-%m") for d in dates})
        open_months: list[str] = []
        credits_dir = Path(settings.reports) / "credits"
        story = DemoCredits(starting=starting_grants(engine, catalog, dates[0], credits_dir))
        as_of = min(REPORT_AS_OF, dates[-1])
        for month in months:  # the last month is still open (its grace days have not landed): drafts only
            if month == month_after(as_of):  # the retirement is announced: transition credits first
                transition_grants(engine, catalog, settings.lake, FAST_MODEL, as_of, credits_dir, story)
            if invoicing.draft(engine, catalog, month, open_month=True).open_month:
                open_months.append(month)
            else:
                invoicing.finalize(engine, catalog, month)
        done = deliver(engine, settings.lake, settings.notify)  # the daily DAG delivers after metering
        delivered = f"{done.sent:,} delivered ({done.sink}), {done.left:,} pending"
        step(STEPS[9])
        closed = [m for m in months if m not in open_months]
        exports = Path(settings.exports) / closed[-1] if closed else None
        sample = None  # the document of the month's largest bill, also drawn as a PDF
        if exports is not None:
            export(engine, closed[-1], exports, "csv,parquet,html", tier_labels=catalog.tier_labels)
            sample = _largest_bill(engine, closed[-1])
            if sample is not None:
                try:
                    export(
                        engine, closed[-1], exports, "pdf", account=sample[0], tier_labels=catalog.tier_labels
                    )
                except UsageBillingError as exc:  # WeasyPrint without its system libraries
                    out.print(f"no PDF of the largest bill: {exc}")
                    sample = None
        step(STEPS[10])
        effectiveness_dir = Path(settings.reports) / "effectiveness"
        try:
            effect: EffectivenessReport | None = effectiveness_report.run(
                engine, settings.lake, catalog, dates[0], dates[-1], effectiveness_dir
            )
        except UsageBillingError:  # a demo shorter than one complete week
            effect = None
        step(STEPS[11])
        report_dir = Path(settings.reports) / as_of.isoformat()
        try:
            report: dict | None = retirement_report(engine, catalog, as_of, report_dir, settings.lake)
            no_report = ""
        except UsageBillingError as exc:  # a short demo (--days) has too few weeks for the detector
            report, no_report = None, str(exc)
        step("done")
    summary.ingest_and_tokens(out, result, summary.tokens_by_model_month(engine))
    summary.speed(out, summary.speed_by_model_tier(engine), catalog)
    summary.quota(out, engine)
    summary.backup_tank(out, engine, settings)
    summary.why_charged(out, engine, settings)
    summary.invoices(out, engine, months, catalog)
    summary.credits(out, engine, story, catalog, FAST_MODEL)
    demo_notify.notifications(out, engine, catalog, FAST_MODEL, delivered)
    for month in open_months:
        out.print(
            f"{month} is still open (the landing days of its grace for late data are not ingested): "
            "drafted as open-month drafts, which are never finalized"
        )
    if effect is not None:
        summary.head_to_head(out, effect.view, FAST_MODEL)
    failed = [r for r in reports if r.failed_errors]
    out.print(
        f"data quality: {len(reports)} partitions checked, {len(failed)} failed"
        + (f" ({', '.join(str(r.day) for r in failed[:5])})" if failed else "")
    )
    outputs: list[tuple[str, object]] = []
    if report is not None:
        flagged = [m["model"] for m in report["models"] if m["flagged"]]
        out.print(f"retirement report as of {as_of}: candidates {', '.join(flagged) or 'none'}")
        fast = next((m for m in report["models"] if m["flagged"] and m["model"] == FAST_MODEL), None)
        if fast is not None:
            p = fast["candidate"]["preview"]
            out.print(f"migration preview of {FAST_MODEL} in {p['month']} (what its accounts would pay):")
            for text in preview_lines(fast["candidate"]):
                out.print(f"  {text}")
        outputs.append(("retirement report", report_dir / "report.html"))
    else:
        out.print(f"no retirement report: {no_report}")
    if effect is not None:
        outputs.append(("effectiveness report", effectiveness_dir / "effectiveness.html"))
    outputs.append(("data quality, every date", index_path(settings.lake)))
    if exports is not None:
        outputs += [
            (f"customer documents {closed[-1]} (HTML, with an index)", exports / "html" / "index.html"),
            *(
                [(f"the largest bill of {closed[-1]} as a PDF", exports / "pdf" / f"{sample[1]}.pdf")]
                if sample is not None
                else []
            ),
            (f"invoices {closed[-1]} (CSV)", exports / "invoices.csv"),
            (f"invoice lines {closed[-1]} (CSV)", exports / "invoice_lines.csv"),
            (f"invoices and lines {closed[-1]} (Parquet)", exports / "invoices.parquet"),
        ]
    if report is not None:
        outputs.append(("retirement report (JSON, Markdown)", report_dir / "report.json"))
        for model in (m["model"] for m in report["models"] if m["flagged"]):
            outputs.append((f"accounts to contact, {model}", report_dir / contacts_file(model)))
    if effect is not None:
        outputs.append(("effectiveness (JSON, Markdown)", effectiveness_dir / "effectiveness.json"))
    outputs += [
        ("warehouse (SQL: the finance_* views)", redact(settings.database_url)),
        ("lake", settings.lake),
    ]
    out.print("")
    out.print("outputs:")
    width = max(len(name) for name, _ in outputs)
    for name, path in outputs:
        out.print(f"  {name:<{width}}  {path}")
    out.print(
        "time per step: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items()),
    )
    out.print(f"demo finished in {time.perf_counter() - began:.0f} s")
    engine.dispose()


def _largest_bill(engine, month: str) -> tuple[str, str] | None:
    """(account, invoice number) of the month's finalized invoice with the largest total."""
    i = Invoice.__table__.c
    with engine.connect() as conn:
        row = conn.execute(
            select(i.account_id, i.invoice_number)
            .where(i.period == month, i.status == "finalized", i.kind == "invoice")
            .order_by(i.total.desc(), i.invoice_number)
            .limit(1)
        ).first()
    return (row.account_id, row.invoice_number) if row else None
