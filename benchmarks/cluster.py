"""run-day of one day on the embedded defaults and on the production profile, side by side in one run.

    .venv/bin/python -m benchmarks.cluster [--events 10000000] [--workers 1 2] [--threads N]

One generated landing day (Parquet, the project's generator) through ``usage-billing run-day``
(ingest, the data-quality gate, aggregation, metering, effectiveness), each run a fresh process:

- embedded: SQLite, a local lake, Beam in process (FnApiRunner, the default threads);
- production profile: the lake and the landing area on S3 (rclone serve s3 on loopback, reached through
  Beam's S3 file system by ``--s3_*`` flags), PostgreSQL, every pipeline on Beam's DaskRunner against
  a ``dask.distributed`` cluster of 1 and then 2 worker processes, the machine's cores shared out among
  them as threads (Dask's default: one worker of two threads on two cores, two of one; ``--threads``).

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
import statistics
import subprocess
import time
import uuid
from pathlib import Path

from benchmarks.cluster_measure import Peaks, contention_of
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


def _base(config: str, database: str, lake: str, landing: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "pipelines.cli", "--config", config, "--database-url", database,
            "--lake", lake, "--landing", landing]  # fmt: skip


@dataclasses.dataclass
class Run:
    wall: float
    peak: dict[str, int]
    cpu: dict[str, float]
    steps: dict[str, dict[str, tuple[float, int]]]  # step -> process -> (CPU s, peak bytes)
    step_wall: dict[str, float]
    out: str
    warm_up: float = 0.0  # workers' CPU s importing the pipelines' modules and GX first (not in ``cpu``)


def _run(argv: list[str], others: dict[str, int]) -> Run:
    """Run the command; its wall time, the peak memory and the CPU seconds of it and of ``others``
    (the command's as last sampled, up to 0.1 s short), per step too, its output."""
    import json
    import tempfile

    fd, times = tempfile.mkstemp(suffix=".jsonl")
    os.close(fd)
    env = {**os.environ, "USAGE_BILLING_STEP_TIMES": times}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with Peaks({"command": proc.pid, **others}) as peaks:
        out, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[-6:]} failed ({proc.returncode}): {err[-3000:]}")
    steps = [json.loads(line) for line in Path(times).read_text().splitlines()]
    os.unlink(times)
    step_wall = {s["step"]: s["end"] - s["start"] for s in steps}
    return Run(wall, peaks.peak, peaks.cpu_used(), peaks.by_step(steps), step_wall, out)


def _embedded(workdir: Path, config: str) -> Run:
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


def _on_dask(workdir: Path, config: str, workers: int, threads: int, endpoint: str, server_pid: int) -> Run:
    import distributed

    from tests.s3 import S3Store

    bucket = S3Store(endpoint)
    landing = workdir / "landing"
    for path in sorted(landing.rglob("*")):
        if path.is_file():
            bucket.put(f"{bucket.root}/landing/{path.relative_to(landing).as_posix()}", path.read_bytes())
    url = _database()
    import dask

    # The workers' statistical profiler off, as docs/deploy.md advises: it walks every thread's stack
    # every 10 ms, a tenth of a worker's own (non-task) CPU in ingest.
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        cluster = distributed.LocalCluster(
            n_workers=workers, threads_per_worker=threads, processes=True, dashboard_address=None,
            memory_limit=None,
        )  # fmt: skip
    client = distributed.Client(cluster)
    try:
        base = _base(config, url, f"{bucket.root}/lake", f"{bucket.root}/landing")
        flags = [
            "--", "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
            f"--dask_client_address={cluster.scheduler_address}", f"--s3_endpoint_url={endpoint}",
            "--s3_access_key_id=test", "--s3_secret_access_key=test", "--s3_region_name=us-east-1",
        ]  # fmt: skip
        subprocess.run([*base, "db", "upgrade"], check=True, capture_output=True)
        subprocess.run(
            [*base, "accounts", "load", str(landing / "accounts.csv")], check=True, capture_output=True
        )
        pids = {f"worker {i + 1}": w.pid for i, w in enumerate(cluster.workers.values())}
        warm_up = _warm_up(client, pids)
        run = _run([*base, "run-day", "--date", DAY.isoformat(), *flags], {**pids, "S3 server": server_pid})
        return dataclasses.replace(run, warm_up=warm_up)
    finally:
        client.close()
        cluster.close()
        bucket.clear()
        _drop(url)


def _warm_up(client, pids: dict[str, int]) -> float:  # type: ignore[no-untyped-def]
    """Each worker imports the pipelines' modules and great-expectations, as the workers of a cluster
    that has run before have: the embedded run imports the pipelines' modules before its first step,
    so a fresh worker would count its imports in ingest and the embedded run would not. The embedded
    run imports great-expectations once, in its gate (about 2 CPU s); a cold worker would too, each
    worker that runs a gate task, so two cold workers would pay it twice. Returns the workers' CPU
    seconds for it (reported beside the runs)."""
    import importlib

    import psutil

    def cpu() -> float:
        return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids.values())

    before = cpu()
    client.run(importlib.import_module, "pipelines.jobs.steps")
    client.run(importlib.import_module, "great_expectations")
    return cpu() - before


Round = list[tuple[str, Run]]  # one run of each configuration, the embedded one first


def _spread(values: list[float], fmt: str) -> str:
    """The median of ``values``, with their range when there are several."""
    mid = format(statistics.median(values), fmt)
    if len(values) < 2:
        return mid
    return f"{mid} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def _row(at: int, rounds: list[Round], events: int) -> str:
    """A configuration's wall time (median), events/s and ratio to the embedded run of the same round,
    its largest peak per process over the rounds and median CPU seconds."""
    name, runs = rounds[0][at][0], [r[at][1] for r in rounds]
    walls = [r.wall for r in runs]
    ratios = [r[at][1].wall / r[0][1].wall for r in rounds]
    peaks = {k: max(r.peak.get(k, 0) for r in runs) for k in runs[0].peak}
    memory = ", ".join(f"{k} {v / 2**20:,.0f}" for k, v in peaks.items())
    seconds = ", ".join(f"{k} {statistics.median(r.cpu.get(k, 0.0) for r in runs):,.0f}" for k in runs[0].cpu)
    return (
        f"| {name} | {_spread(walls, ',.1f')} | {events / statistics.median(walls):,.0f} | "
        f"{_spread(ratios, '.2f')}x | {memory} | {seconds} |"
    )


def _workers(use: dict[str, tuple[float, int]]) -> tuple[float, int]:
    """The Dask workers' CPU seconds together and the highest peak of one of them."""
    mine = [v for k, v in use.items() if k.startswith("worker")]
    return sum(c for c, _ in mine), max((m for _, m in mine), default=0)


def _steps_table(rounds: list[Round]) -> str:
    """Per step: wall, the command's (driver's) CPU, the workers' CPU, the S3 server's, and each as a
    ratio to the embedded run's CPU for the step in the same round (medians over the rounds, their
    range in brackets); the largest peak memory of each process over the rounds."""
    lines = [
        "| step | run | wall s | driver CPU s | workers CPU s | S3 server CPU s | driver / embedded CPU | "
        "workers / embedded CPU | peak MB (driver, worst worker) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for step in rounds[0][0][1].steps:
        for at, (name, _) in enumerate(rounds[0]):
            cols: dict[str, list[float]] = {k: [] for k in ("wall", "driver", "workers", "server", "rd", "rw")}
            peaks = [0, 0]
            for one in rounds:
                run, embedded_cpu = one[at][1], one[0][1].steps[step]["command"][0] or 1e-9
                use = run.steps.get(step, {})
                driver, driver_peak = use.get("command", (0.0, 0))
                workers, worker_peak = _workers(use)
                for key, value in (
                    ("wall", run.step_wall.get(step, 0.0)), ("driver", driver), ("workers", workers),
                    ("server", use.get("S3 server", (0.0, 0))[0]), ("rd", driver / embedded_cpu),
                    ("rw", workers / embedded_cpu),
                ):  # fmt: skip
                    cols[key].append(value)
                peaks = [max(peaks[0], driver_peak), max(peaks[1], worker_peak)]
            lines.append(
                f"| {step} | {name} | {_spread(cols['wall'], ',.1f')} | {_spread(cols['driver'], ',.1f')} | "
                f"{_spread(cols['workers'], ',.1f')} | {_spread(cols['server'], ',.1f')} | "
                f"{_spread(cols['rd'], '.2f')} | {_spread(cols['rw'], '.2f')} | "
                f"{peaks[0] / 2**20:,.0f}, {peaks[1] / 2**20:,.0f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--workdir", default="/tmp/ub-bench-cluster")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Dask runs, by worker count")
    parser.add_argument(
        "--threads", type=int, default=None, help="threads per worker (default: the cores shared out, as Dask does)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="run every configuration this many times, in turn; medians (and ranges) are reported",
    )  # fmt: skip
    args = parser.parse_args()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    events = _generate(workdir, args.events)
    config = str(ROOT / "config" / "catalog.toml")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.pop(name, None)  # the flags configure S3, as in the end-to-end test
    rounds: list[Round] = []
    contention: list[tuple[float, float]] = []
    from tests.s3 import s3_server

    with s3_server() as endpoint:
        import psutil

        server = next(p for p in psutil.Process().children() if "rclone" in " ".join(p.cmdline()))
        for number in range(1, args.rounds + 1):  # in turn: the machine's drift falls on every configuration
            contention.append(contention_of(workdir))
            run = _embedded(workdir, config)
            print(f"round {number} embedded", run.wall, run.cpu, run.step_wall, run.out[-300:], flush=True)
            rows: Round = [("embedded", run)]
            for workers in args.workers:
                threads = args.threads or max(1, (os.cpu_count() or 1) // workers)
                run = _on_dask(workdir, config, workers, threads, endpoint, server.pid)
                print(f"round {number} dask {workers}", run.wall, run.cpu, run.warm_up, run.step_wall, flush=True)
                rows.append((f"Dask, {workers} worker(s) x {threads} thread(s)", run))
            rounds.append(rows)
    table = "\n".join(_row(at, rounds, events) for at in range(len(rounds[0])))
    warm_up = {n: statistics.median(r[at][1].warm_up for r in rounds) for at, (n, _) in enumerate(rounds[0])}
    several = (
        f" Every configuration ran {args.rounds} times, in turn (embedded, then each cluster, round after "
        "round); each figure is the median of the rounds with their range in brackets, and each ratio is "
        "taken against the embedded run of its own round." if args.rounds > 1 else ""
    )
    alone, paired = [a for a, _ in contention], [b for _, b in contention]
    machine_note = (
        f"\n\nThe machine's own price of two processes at once (`probe_work`: a landing file's partial "
        f"sums and a sort, in one process alone, then in two at the same time): {_spread(alone, '.2f')} "
        f"CPU s alone, {_spread(paired, '.2f')} CPU s each when paired, "
        f"{_spread([b / a for a, b in contention], '.2f')}x. Two one-thread workers pay it on the work "
        "they do at the same time, and the embedded run pays it where its threads overlap."
    )
    write_section(
        "Production profile: run-day on Dask, S3 and PostgreSQL",
        f"`{command_line('benchmarks.cluster')}`\n\nMachine: {machine()}. One landing day of {events:,} "
        "events (Parquet), `usage-billing run-day` (ingest, gate, aggregate, meter, effectiveness) in a "
        "fresh process each time: embedded = SQLite, a local lake, Beam's FnApiRunner; Dask = the lake "
        "and landing area on S3 (`rclone serve s3` on loopback), PostgreSQL, Beam's DaskRunner on a "
        "local dask.distributed cluster of worker processes, each with the machine's cores shared out as "
        "threads (Dask's own default; the embedded run uses a thread per core too). Peak memory: "
        "resident MB of each process (with its children); CPU: the seconds each process used during the "
        "run (user + system). The workers' statistical profiler is off (`distributed.worker.profile."
        "enabled: false`), as docs/deploy.md advises. Each cluster's workers import the pipelines' modules and great-expectations "
        "before the run, as a long-lived cluster's have (the embedded run imports the pipelines' modules "
        "before its first step, and great-expectations once, in its gate): "
        + ", ".join(f"{n} {w:.1f} CPU s" for n, w in list(warm_up.items())[1:])
        + " in all, not counted above." + several + "\n\n"
        "| run | wall s | events/s | vs embedded | peak memory MB | CPU s |\n|---|---|---|---|---|---|\n"
        + table
        + machine_note
        + "\n\nPer step (the command's step times, `USAGE_BILLING_STEP_TIMES`; CPU and memory sampled "
        "every 100 ms):\n\n" + _steps_table(rounds),
    )


if __name__ == "__main__":
    main()
