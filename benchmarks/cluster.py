"""run-day of one day on the embedded defaults and on the production profile, side by side in one run.

    .venv/bin/python -m benchmarks.cluster [--events 10000000] [--workdir /tmp/ub-bench-cluster]

One generated landing day (Parquet, the project's generator) through ``usage-billing run-day``
(ingest, the data-quality gate, aggregation, metering, effectiveness), each run a fresh process:

- embedded: SQLite, a local lake, Beam in process (FnApiRunner, the default threads);
- production profile: the lake and the landing area on S3 (moto's server on loopback, reached through
  Beam's S3 file system by ``--s3_*`` flags), PostgreSQL, every pipeline on Beam's DaskRunner against
  a ``dask.distributed`` cluster of 1 and then 2 worker processes (one thread each).

Reports wall time, events per second and the peak resident memory of each process: the command (the
driver), each Dask worker, and the S3 server. Needs PostgreSQL (``USAGE_BILLING_TEST_POSTGRES_URL`` or
postgresql+psycopg://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

from benchmarks.common import ROOT, command_line, machine, write_section

DAY = dt.date(2026, 3, 2)
PG = os.environ.get("USAGE_BILLING_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _generate(workdir: Path, events: int) -> int:
    from pipelines.jobs.generate import GeneratorConfig, generate
    from pipelines.jobs.landing import write_landing
    from schemas.catalog import load_catalog

    catalog = load_catalog(ROOT / "config" / "catalog.toml")
    cfg = GeneratorConfig(
        start=DAY, days=1, accounts=max(1000, events // 100), events_per_day=int(events * 1.1), seed=3,
        late_rate=0.0, fmt="parquet",
    )  # fmt: skip
    gen = generate(catalog, cfg)
    gen = dataclasses.replace(gen, events=gen.events.slice(0, events))
    write_landing(gen, cfg, str(workdir / "landing"))
    return gen.events.num_rows


class Peaks:
    """Samples the resident memory of named processes (and their children) every 100 ms."""

    def __init__(self, processes: dict[str, int]) -> None:
        import psutil

        self.procs = {name: psutil.Process(pid) for name, pid in processes.items()}
        self.peak = dict.fromkeys(processes, 0)
        self.start_cpu = {name: self._cpu(p) for name, p in self.procs.items()}
        self.cpu = dict(self.start_cpu)  # CPU seconds (user + system) last seen, children included
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        while not self._stop.is_set():
            for name, proc in self.procs.items():
                try:
                    tree = [proc, *proc.children(recursive=True)]
                    rss = sum(p.memory_info().rss for p in tree if p.is_running())
                    self.cpu[name] = self._cpu(proc)
                except psutil.Error:
                    continue
                self.peak[name] = max(self.peak[name], rss)
            time.sleep(0.1)

    @staticmethod
    def _cpu(proc) -> float:  # type: ignore[no-untyped-def]
        import psutil

        try:
            tree = [proc, *proc.children(recursive=True)]
            return sum(sum(p.cpu_times()[:2]) for p in tree if p.is_running())
        except psutil.Error:
            return 0.0

    def cpu_used(self) -> dict[str, float]:
        return {name: self.cpu[name] - self.start_cpu[name] for name in self.procs}

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _base(config: str, database: str, lake: str, landing: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "pipelines.cli", "--config", config, "--database-url", database,
            "--lake", lake, "--landing", landing]  # fmt: skip


def _run(argv: list[str], others: dict[str, int], env: dict | None = None):  # type: ignore[no-untyped-def]
    """Run the command; its wall time, the peak memory and the CPU seconds of it and of ``others``
    (the command's as last sampled, up to 0.1 s short), its output."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with Peaks({"command": proc.pid, **others}) as peaks:
        out, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[-6:]} failed ({proc.returncode}): {err[-3000:]}")
    return wall, peaks.peak, peaks.cpu_used(), out


def _embedded(workdir: Path, config: str) -> tuple[float, dict[str, int], str]:
    run = workdir / "embedded"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    base = _base(config, f"sqlite:///{run / 'w.db'}", str(run / "lake"), str(workdir / "landing"))
    subprocess.run([*base, "db", "upgrade"], check=True, capture_output=True)
    subprocess.run([*base, "accounts", "load", str(workdir / "landing" / "accounts.csv")], check=True,
                   capture_output=True)  # fmt: skip
    return _run([*base, "run-day", "--date", DAY.isoformat()], {})


def _database() -> str:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"ub_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(PG).set(database=name).render_as_string(hide_password=False)


def _drop(url: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin = create_engine(PG, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


def _on_dask(workdir: Path, config: str, workers: int, endpoint: str, moto_pid: int):  # type: ignore[no-untyped-def]
    import distributed

    from tests.s3 import S3Store

    bucket = S3Store(endpoint)
    landing = workdir / "landing"
    for path in sorted(landing.rglob("*")):
        if path.is_file():
            bucket.put(f"{bucket.root}/landing/{path.relative_to(landing).as_posix()}", path.read_bytes())
    url = _database()
    cluster = distributed.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit=None
    )
    client = distributed.Client(cluster)
    try:
        base = _base(config, url, f"{bucket.root}/lake", f"{bucket.root}/landing")
        flags = [
            "--", "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
            f"--dask_client_address={cluster.scheduler_address}", f"--s3_endpoint_url={endpoint}",
            "--s3_access_key_id=bench", "--s3_secret_access_key=bench", "--s3_region_name=us-east-1",
        ]  # fmt: skip
        subprocess.run([*base, "db", "upgrade"], check=True, capture_output=True)
        subprocess.run(
            [*base, "accounts", "load", str(landing / "accounts.csv")], check=True, capture_output=True
        )
        pids = {f"worker {i + 1}": w.pid for i, w in enumerate(cluster.workers.values())}
        return _run([*base, "run-day", "--date", DAY.isoformat(), *flags], {**pids, "S3 server": moto_pid})
    finally:
        client.close()
        cluster.close()
        bucket.clear()
        _drop(url)


def _row(name: str, wall: float, events: int, peaks: dict, cpu: dict, base: float) -> str:  # type: ignore[type-arg]
    memory = ", ".join(f"{k} {v / 2**20:,.0f}" for k, v in peaks.items())
    seconds = ", ".join(f"{k} {v:,.0f}" for k, v in cpu.items())
    return f"| {name} | {wall:,.1f} | {events / wall:,.0f} | {wall / base:.2f}x | {memory} | {seconds} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--workdir", default="/tmp/ub-bench-cluster")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    events = _generate(workdir, args.events)
    config = str(ROOT / "config" / "catalog.toml")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.pop(name, None)  # the flags configure S3, as in the end-to-end test
    rows = []
    wall, peaks, cpu, out = _embedded(workdir, config)
    print("embedded", wall, peaks, cpu, out[-300:], flush=True)
    rows.append(("embedded: SQLite, local lake, FnApiRunner", wall, peaks, cpu))
    from tests.s3 import s3_server

    with s3_server() as endpoint:
        import psutil

        moto = next(p for p in psutil.Process().children() if "moto.server" in " ".join(p.cmdline()))
        for workers in (1, 2):
            wall, peaks, cpu, out = _on_dask(workdir, config, workers, endpoint, moto.pid)
            print(f"dask {workers}", wall, peaks, cpu, out[-300:], flush=True)
            rows.append((f"S3 (moto) + PostgreSQL + Dask, {workers} worker process(es)", wall, peaks, cpu))
    base = rows[0][1]
    table = "\n".join(_row(n, w, events, p, c, base) for n, w, p, c in rows)
    write_section(
        "Production profile: run-day on Dask, S3 and PostgreSQL (issue 29)",
        f"`{command_line('benchmarks.cluster')}`\n\nMachine: {machine()}. One landing day of {events:,} "
        "events (Parquet), `usage-billing run-day` (ingest, gate, aggregate, meter, effectiveness) in a "
        "fresh process each time. Peak memory: resident MB of each process (with its children); CPU: the "
        "seconds each process used during the run (user + system).\n\n"
        "| run | wall s | events/s | vs embedded | peak memory MB | CPU s |\n|---|---|---|---|---|---|\n"
        + table,
    )


if __name__ == "__main__":
    main()
