"""Notifications end to end: the pool thresholds a metering run crosses, in the outbox with the
metering, delivered to a real webhook receiver on 127.0.0.1 that verifies every signature and fails
for a while (500s, slow answers, closed connections): every crossing arrives, none is sent again after
the receiver took it, and what arrives equals the crossings computed here, independently, from the
allocation records and ``pool_usage``. On SQLite and PostgreSQL; a killed ``notify deliver`` resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import DBAPIError

from pipelines.cli import main
from pipelines.notify import deliver as delivery
from pipelines.notify.outbox import POOL_CROSSED
from pipelines.settings import NotifySettings, Settings
from pipelines.warehouse.engine import as_utc, make_engine
from schemas.catalog import load_catalog
from schemas.warehouse import Notification, PoolUsage
from tests.conftest import ROOT, Built, build_once, cli_args, small_dates
from tests.notify.receiver import SECRET, Receiver

pytestmark = pytest.mark.slow

DAYS = [d.isoformat() for d in small_dates()]
FAULTS = ["500", "close", "slow", "ok", "500", "500", "close", "ok", "slow", "500"] * 3


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def metered_once(request, tmp_path_factory, small_landing) -> Iterator[Built]:  # type: ignore[no-untyped-def]
    yield from build_once(
        request.param,
        tmp_path_factory.mktemp(f"notify-{request.param}"),
        small_landing,
        [
            ["accounts", "load", str(Path(small_landing) / "accounts.csv")],
            ["events", "ingest", "--from", DAYS[0], "--to", DAYS[-1]],
            ["quota", "meter", "--from", DAYS[0], "--to", DAYS[-1]],
        ],
    )


@pytest.fixture
def metered(metered_once, tmp_path, request) -> Settings:  # type: ignore[no-untyped-def]
    return metered_once.copy(tmp_path, request)


def expected_crossings(settings: Settings) -> dict[tuple, dict]:
    """The pool crossings, from the allocation records (each key's draws in event order) and the
    allowances in ``pool_usage``: (account, plan, pool, period start, threshold) -> the figures."""
    catalog = load_catalog(settings.config)
    engine = make_engine(settings.database_url)
    p = PoolUsage.__table__.c
    with engine.connect() as conn:
        pools = {
            (r.account_id, r.plan, r.pool, str(r.period_start)[:10]): (
                r.allowance,
                r.used,
                as_utc(r.exhausted_at),
            )
            for r in conn.execute(
                select(p.account_id, p.plan, p.pool, p.period_start, p.allowance, p.used, p.exhausted_at)
            )
        }
    engine.dispose()
    records = ds.dataset(f"{settings.lake}/allocations", format="parquet", partitioning="hive").to_table()
    draws: dict[tuple, list] = {}
    for r in records.to_pylist():
        key = (r["account_id"], r["plan"], r["pool"], r["period_start"].isoformat())
        draws.setdefault(key, []).append((r["event_time"], r["event_id"], r["tokens"]))
    out = {}
    for key, rows in draws.items():
        allowance, used, exhausted_at = pools[key]
        assert sum(t for _, _, t in rows) == used  # every draw of the period is in the records
        cum = 0
        shares = list(catalog.notifications.pool_thresholds)
        for when, event_id, tokens in sorted(rows):
            cum += tokens
            while shares and cum >= Fraction(str(shares[0])) * allowance:
                share = shares.pop(0)
                if share == 1:  # the exhaustion: the event pool_usage names (and quota explain shows)
                    assert when == exhausted_at, key
                out[(*key, float(share))] = {
                    "used": cum,
                    "allowance": allowance,
                    "event_id": event_id,
                    "crossed_at": when.isoformat().replace("+00:00", "Z"),
                }
    return out


def received(receiver: Receiver) -> dict[tuple, dict]:
    out = {}
    for event in receiver.taken.values():
        assert event["type"] == POOL_CROSSED and event["specversion"] == "1.0"
        d = event["data"]
        assert event["subject"] == d["account_id"]
        key = (d["account_id"], d["plan"], d["pool"], d["period_start"], d["threshold"])
        assert key not in out
        out[key] = {k: d[k] for k in ("used", "allowance", "event_id", "crossed_at")}
    return out


def _config(url: str | None, **kw) -> NotifySettings:  # type: ignore[no-untyped-def]
    kw = {"timeout_s": 0.4, **kw}
    return NotifySettings(webhook_url=url, webhook_secret=SECRET, retry_base_s=0.0, concurrency=4, **kw)


def test_every_crossing_arrives_signed_once_through_500s_slow_answers_and_closed_connections(metered, capsys):
    expected = expected_crossings(metered)
    assert len(expected) > 50 and {k[-1] for k in expected} == {0.8, 1.0}
    engine = make_engine(metered.database_url)
    lake = metered.lake

    # A receiver that never takes anything: each notification is dead after its attempts, last error kept.
    # The timeout is long enough that a fast 500 on a loaded machine still arrives within it (a late
    # answer would be kept as a timeout, a different last error).
    with Receiver(faults=["500"] * 10_000) as down:
        done = delivery.deliver(engine, lake, _config(down.url, max_attempts=2, timeout_s=5.0))
    assert (done.sent, done.dead, done.left) == (0, len(expected), 0)
    n = Notification.__table__.c
    with engine.connect() as conn:
        errors = set(conn.execute(select(n.last_error).where(n.status == "dead")).scalars())
    assert errors == {"HTTP 500: "}
    capsys.readouterr()
    assert main([*cli_args(metered), "notify", "list", "--status", "dead", "--limit", "3"]) == 0
    listed = capsys.readouterr().out
    assert f"{POOL_CROSSED}: 0 pending, 0 sent, {len(expected):,} dead" in listed
    assert listed.count("dead after 2 attempt(s), last error: HTTP 500") == 3
    assert main([*cli_args(metered), "notify", "retry", "--dead"]) == 0
    assert f"{len(expected):,} dead notifications pending again" in capsys.readouterr().out

    # A receiver that answers too slowly: the run's time bound stops it after a few requests; what it
    # did not try stays pending with no attempt counted.
    with Receiver(faults=["slow"] * 10_000, slow_s=0.6) as slow:
        done = delivery.deliver(engine, lake, _config(slow.url), max_seconds=1.0)
    assert done.sent == 0 and 0 < done.failed == slow.requests <= 12 and done.left == len(expected)

    # Then a receiver that fails the first 30 requests in every way: retried until all are taken. The
    # sender's timeout here is long enough that a fast 2xx on a loaded machine still arrives within it
    # (a 2xx that arrives late is a timeout to the sender, and sending again is then right).
    with Receiver(faults=FAULTS, slow_s=2.0) as flaky:
        rounds = 0
        while True:
            done = delivery.deliver(engine, lake, _config(flaky.url, timeout_s=1.5))
            rounds += 1
            if done.left == 0 or rounds > 20:
                break
    assert done.left == 0 and done.dead == 0
    assert flaky.bad_signatures == 0 and flaky.after_taken == []
    assert {"500", "close", "slow", "ok"} <= set(flaky.answers)
    assert received(flaky) == expected
    with engine.connect() as conn:
        assert set(conn.execute(select(n.status)).scalars()) == {"sent"}
    # Nothing new to send: a rerun of delivery sends nothing.
    with Receiver() as idle:
        assert delivery.deliver(engine, lake, _config(idle.url)).sent == 0 and idle.requests == 0
    # What a notification says is never changed or deleted; only its delivery state moves.
    for statement in (update(Notification).values(data="{}"), Notification.__table__.delete()):
        with pytest.raises(DBAPIError, match="a notification never changes"), engine.begin() as conn:
            conn.execute(statement)
    engine.dispose()


@pytest.mark.parametrize("metered_once", ["sqlite"], indirect=True)  # the kill is the same on both
def test_a_killed_deliver_resumes_without_loss_and_json_lines_are_the_default(metered, tmp_path):
    expected = expected_crossings(metered)
    env = {k: v for k, v in os.environ.items() if not k.startswith("USAGE_BILLING_")}
    with Receiver() as receiver:
        env.update(
            USAGE_BILLING_WEBHOOK_URL=receiver.url,
            USAGE_BILLING_WEBHOOK_SECRET=SECRET,
            USAGE_BILLING_FAULT="notify.sent:kill:1",
        )
        bin_ = str(Path(sys.executable).with_name("usage-billing"))
        killed = subprocess.run(
            [bin_, *cli_args(metered), "notify", "deliver"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            timeout=300,
        )
        assert killed.returncode == -9
        first_round = set(receiver.taken)
        assert 0 < len(first_round) <= delivery.BATCH
        engine = make_engine(metered.database_url)
        done = delivery.deliver(engine, metered.lake, _config(receiver.url))
        assert done.sent == len(expected) and done.left == 0
        assert set(receiver.after_taken) <= first_round  # at least once: only the unmarked round again
        assert received(receiver) == expected

    # Without a webhook: JSON lines under the lake, each notification once, the same CloudEvents.
    with engine.begin() as conn:
        conn.execute(text("UPDATE notifications SET status = 'pending', attempts = 0"))
    done = delivery.deliver(engine, metered.lake, NotifySettings())
    assert done.sent == len(expected) and done.sink.startswith("JSON lines")
    lines = [
        json.loads(line)
        for f in sorted(Path(metered.lake, "notifications").rglob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert sorted(e["id"] for e in lines) == sorted(receiver.taken)
    assert {e["id"]: e for e in lines} == receiver.taken
    engine.dispose()


@pytest.mark.parametrize("metered_once", ["sqlite"], indirect=True)  # the outbox logic is one SQL path
def test_a_crossing_that_a_remetering_undoes_is_retracted_never_edited_and_a_new_one_gets_a_new_id(
    metered, tmp_path
):
    engine = make_engine(metered.database_url)
    n = Notification.__table__.c
    columns = (
        n.notification_id,
        n.type,
        n.account_id,
        n.pool,
        n.period_start,
        n.threshold,
        n.retracts,
        n.data,
    )
    with engine.connect() as conn:
        before = {r.notification_id: tuple(r) for r in conn.execute(select(*columns))}
    account = max({r[2] for r in before.values()}, key=lambda a: (sum(r[2] == a for r in before.values()), a))
    crossed = {i: r for i, r in before.items() if r[2] == account}
    source = Path(metered.landing) / "accounts.csv"
    rows = source.read_text().split("\n")
    moved = [
        ",".join([account, "", *line.split(",")[2:]]) if line.startswith(account + ",") else line
        for line in rows
    ]  # pay as you go: no pool, so no crossing
    (tmp_path / "payg.csv").write_text("\n".join(moved))

    def meter_with(accounts: Path) -> dict[str, tuple]:
        assert main([*cli_args(metered), "accounts", "load", str(accounts)]) == 0
        assert main([*cli_args(metered), "quota", "meter", "--from", DAYS[0], "--to", DAYS[-1]]) == 0
        with engine.connect() as conn:
            return {r.notification_id: tuple(r) for r in conn.execute(select(*columns))}

    after = meter_with(tmp_path / "payg.csv")
    assert {i: after[i] for i in before} == before  # nothing said is changed or deleted
    new = {i: r for i, r in after.items() if i not in before}
    assert {r[6] for r in new.values()} == set(crossed)  # one retraction per crossing of the account
    assert all(r[1] == POOL_CROSSED + ".retracted" and r[2] == account for r in new.values())
    assert all(new[i][7] == before[new[i][6]][7] for i in new)  # it repeats what it retracts

    again = meter_with(source)  # the plan back: the crossings again, as new notifications
    fresh = {i: r for i, r in again.items() if i not in after}
    assert sorted(r[1:6] + r[7:] for r in fresh.values()) == sorted(r[1:6] + r[7:] for r in crossed.values())
    assert not set(fresh) & set(before)
    assert meter_with(source) == again  # and a rerun that moves nothing writes nothing
    engine.dispose()
