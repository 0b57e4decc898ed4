"""Notifications: what they cost metering, and how fast `notify deliver` sends them.

    .venv/bin/python -m benchmarks.notify [--events 10000000] [--rounds 2] [--deliveries 100000]

Metering: the lake of ``benchmarks.meter`` (28 days, 5,000 accounts, the catalog's plans) is
generated once; each round meters the whole month in a fresh SQLite warehouse with the default catalog
(pool thresholds 0.8 and 1.0: the crossings computed with the allocation and written into the outbox
in the load transaction) and with the same catalog without ``[notifications]``, alternating. Target:
with notifications within 1.1x of without.

Delivery: a warehouse holding ``--deliveries`` pending notifications is delivered by
`usage-billing notify deliver` (a process: CloudEvents, Standard Webhooks signatures, four requests
in flight, the outbox updated per round) to a receiver in another process on 127.0.0.1 that answers
204; side by side, a bare loop of the same signed POSTs (the same client, the same four threads, no
database). Throughput and the peak memory of the sending process.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

from benchmarks.common import ROOT, cli, command_line, machine, run_measured, write_section
from benchmarks.meter import DAYS, PHASES, START, _generate

RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(204); self.send_header("content-length", "0"); self.end_headers()
s = ThreadingHTTPServer(("127.0.0.1", 0), H); s.daemon_threads = True
print(s.server_address[1], flush=True); s.serve_forever()
"""
SECRET = "whsec_" + "YmVuY2htYXJrLXNlY3JldC1mb3ItdGhlLW5vdGlmaWNhdGlvbnM="


def _catalogs(root: Path) -> dict[str, Path]:
    text = (ROOT / "config" / "catalog.toml").read_text()
    start = text.index("[notifications]")
    end = text.find("\n[", start + 1)
    without = text[:start] + (text[end + 1 :] if end >= 0 else "")
    assert "pool_thresholds" not in without
    (root / "without.toml").write_text(without)
    return {"with notifications": ROOT / "config" / "catalog.toml", "without": root / "without.toml"}


def _meter(root: Path, catalog: Path) -> tuple[float, float, float, int]:
    """(wall, Beam pipeline, warehouse load seconds, notifications written) of metering the month."""
    db = root / "w.db"
    db.unlink(missing_ok=True)
    base = cli(db, root / "lake")
    base[base.index("--config") + 1] = str(catalog)
    run_measured([*base, "db", "upgrade"])
    run_measured([*base, "accounts", "load", str(root / "accounts.csv")])
    end = START + dt.timedelta(days=DAYS - 1)
    wall, _, out = run_measured([*base, "quota", "meter", "--from", str(START), "--to", str(end)])
    phases = re.search(PHASES, out)
    written = re.search(r"notifications: ([\d,]+) written", out)
    assert phases and written, out
    return wall, float(phases[1]), float(phases[2]), int(written[1].replace(",", ""))


def metering(root: Path, events: int, rounds: int) -> str:
    if not (root / "lake").exists():
        _generate(root, events)
    catalogs = _catalogs(root)
    runs: dict[str, list[tuple[float, float, float, int]]] = {k: [] for k in catalogs}
    for _ in range(rounds):
        for name, path in catalogs.items():
            runs[name].append(_meter(root, path))
    lines = [
        "| catalog | wall per round (s) | median | Beam pipeline | warehouse load | notifications |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, rs in runs.items():
        walls = ", ".join(f"{r[0]:.1f}" for r in rs)
        best = min(rs)
        lines.append(
            f"| {name} | {walls} | {statistics.median(r[0] for r in rs):.1f} | {best[1]:.1f} | {best[2]:.1f} "
            f"| {best[3]:,} |"
        )
    ratio = statistics.median(r[0] for r in runs["with notifications"]) / statistics.median(
        r[0] for r in runs["without"]
    )
    lines.append(f"\nWith notifications / without (medians): **{ratio:.3f}x** (target <= 1.1x).")
    return "\n".join(lines)


def _outbox(db: Path, n: int) -> list[str]:
    """A fresh warehouse with ``n`` pending pool notifications, recorded as metering records them; the
    CLI on it."""
    from pipelines.notify.pools import record_pools
    from pipelines.warehouse.engine import make_engine
    from schemas.lake import CROSSING_SCHEMA

    db.unlink(missing_ok=True)
    base = cli(db, db.parent / "lake-deliver")
    run_measured([*base, "db", "upgrade"])
    days = [dt.date(2026, 3, 2) + dt.timedelta(days=i // 5000) for i in range(n)]
    crossings = pa.table(
        {
            "account_id": [f"acct-{i % 5000:05d}" for i in range(n)],
            "plan": ["plus"] * n,
            "pool": ["main"] * n,
            "period_start": days,
            "threshold": ["0.8"] * n,
            "used": [600_000] * n,
            "allowance": [750_000] * n,
            "event_id": [f"evt-{i:08d}" for i in range(n)],
            "event_time": [dt.datetime.combine(d, dt.time(12), dt.UTC) for d in days],
            "local_day": days,
        },
        schema=CROSSING_SCHEMA,
    )
    engine = make_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        assert record_pools(conn, crossings, days[0], days[-1], "benchmark")["crossed"] == n
    engine.dispose()
    return base


def _bare_loop(url: str, bodies: list[tuple[str, bytes]]) -> float:
    """The same signed POSTs, four in flight, nothing else: seconds."""
    import httpx
    from standardwebhooks.webhooks import Webhook

    hook = Webhook(SECRET)
    client = httpx.Client(timeout=10, limits=httpx.Limits(max_connections=4, max_keepalive_connections=4))

    def post(item: tuple[str, bytes]) -> int:
        msg_id, body = item
        now = dt.datetime.now(dt.UTC)
        headers = {
            "content-type": "application/cloudevents+json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": hook.sign(msg_id, now, body),
        }
        return client.post(url, content=body, headers=headers).status_code

    began = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        codes = list(pool.map(post, bodies))
    seconds = time.perf_counter() - began
    assert set(codes) == {204}
    client.close()
    return seconds


def delivery(root: Path, n: int) -> str:
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{receiver.stdout.readline().strip()}/hook"  # type: ignore[union-attr]
        base = _outbox(root / "deliver.db", n)
        env = {**os.environ, "USAGE_BILLING_WEBHOOK_URL": url, "USAGE_BILLING_WEBHOOK_SECRET": SECRET}
        wall, rss, out = run_measured([*base, "notify", "deliver", "--max-seconds", "3600"], env=env)
        assert f"{n:,} sent" in out, out
        bodies = [
            (f"ntf_{i:032x}", json.dumps({"id": f"ntf_{i:032x}", "data": {"i": i}}).encode() * 3)
            for i in range(n)
        ]
        bare = _bare_loop(url, bodies)
    finally:
        receiver.kill()
    return "\n".join(
        [
            "| sender | notifications | seconds | per second | peak RSS |",
            "|---|---:|---:|---:|---:|",
            f"| `usage-billing notify deliver` (process start included) | {n:,} | {wall:.1f} | {n / wall:,.0f} | {rss:,.0f} MB |",
            f"| bare loop of signed POSTs (in this process, no database) | {n:,} | {bare:.1f} | {n / bare:,.0f} | |",
            f"\n`notify deliver` / bare loop: **{wall / bare:.2f}x** the time.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--deliveries", type=int, default=100_000)
    parser.add_argument("--workdir", default="/tmp/ub-bench-notify")
    parser.add_argument("--skip-metering", action="store_true")
    parser.add_argument("--skip-delivery", action="store_true")
    args = parser.parse_args()
    root = Path(args.workdir)
    root.mkdir(parents=True, exist_ok=True)
    head = f"`{command_line('benchmarks.notify')}` on {machine()}, {dt.date.today()}.\n"
    if not args.skip_metering:
        body = metering(root, args.events, args.rounds)
        write_section(
            "Notifications: metering with and without",
            f"{head}\nMetering {args.events:,} events (28 days, 5,000 accounts), {args.rounds} rounds:\n\n{body}",
        )
    if not args.skip_delivery:
        body = delivery(root, args.deliveries)
        write_section(
            "Notifications: delivery",
            f"{head}\nDelivering {args.deliveries:,} notifications to a receiver on 127.0.0.1:\n\n{body}",
        )
    shutil.rmtree(root / "lake-deliver", ignore_errors=True)


if __name__ == "__main__":
    main()
