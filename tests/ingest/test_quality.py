"""The data-quality gate: GX suite on clean partitions, stored results, blocking and acceptance."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from pipelines.errors import DataQualityError
from pipelines.ingest import quality, quality_gx, quality_pages
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import to_json_lines
from pipelines.settings import Settings
from pipelines.warehouse.engine import make_engine
from schemas.warehouse import DqAcceptance, DqResult, UsageDaily
from tests.conftest import Built, build_once, cli_args, run_day

DAY = dt.date(2026, 3, 23)  # a Monday; history on the three Mondays before


def _landing(tmp_path: Path, catalog, counts: dict[dt.date, int]) -> Path:  # type: ignore[no-untyped-def]
    """Landing folders holding ``counts[d]`` clean events of day d (JSON lines)."""
    root = tmp_path / "landing"
    for day, n in counts.items():
        gen = generate(
            catalog,
            GeneratorConfig(
                start=day,
                days=1,
                accounts=200,
                events_per_day=n * 2,
                seed=day.day,
                duplicate_rate=0,
                late_rate=0,
            ),
        )
        events = gen.events.drop_columns(["landing_date"]).slice(0, n)
        folder = root / day.isoformat()
        folder.mkdir(parents=True)
        (folder / "events.jsonl").write_bytes(to_json_lines(events))
    return root


@pytest.fixture(scope="module")
def volume_drop_once(tmp_path_factory, catalog) -> Iterator[Built]:  # type: ignore[no-untyped-def]
    """Three Mondays of 1,000 events run day by day, and a fourth landed with 120 (not yet run), built
    once for the module."""
    root = tmp_path_factory.mktemp("volume-drop")
    counts = {DAY - dt.timedelta(days=7 * k): 1000 for k in (3, 2, 1)}
    counts[DAY] = 120  # a drop far below a third of the same-weekday median
    landing = _landing(root, catalog, counts)
    steps = [["run-day", "--date", str(d)] for d in sorted(counts)[:-1]]
    yield from build_once("sqlite", root, landing, steps)


@pytest.fixture
def volume_drop(volume_drop_once, tmp_path, request) -> Settings:  # type: ignore[no-untyped-def]
    return volume_drop_once.copy(tmp_path, request)


def test_clean_partitions_pass_and_results_are_stored_and_rendered(volume_drop):
    engine = make_engine(volume_drop.database_url)
    first = DAY - dt.timedelta(days=21)
    with Session(engine) as session:
        rows = session.scalars(select(DqResult).where(DqResult.day == first)).all()
    names = {r.check_name for r in rows}
    assert {"event_id_unique", "model_known", "input_tokens_in_range", "volume_vs_same_weekday"} <= names
    assert all(r.success for r in rows if r.level == "error")
    volume = next(r for r in rows if r.check_name == "volume_vs_same_weekday")
    assert "not judged" in volume.observed  # no history before the first Monday
    page = Path(quality_pages.html_path(volume_drop.lake, first)).read_text()
    assert 'Gate: <span class="passed">passed</span>' in page and "event_id_unique" in page


def test_a_volume_drop_blocks_downstream_until_accepted(volume_drop):
    with pytest.raises(DataQualityError) as info:
        run_day(volume_drop, [DAY])
    message = str(info.value)
    assert "data-quality gate failed for 2026-03-23 (volume_vs_same_weekday)" in message
    assert "usage-billing dq accept --date 2026-03-23" in message and "\n" not in message
    engine = make_engine(volume_drop.database_url)
    with Session(engine) as session:
        aggregated = session.execute(select(UsageDaily.day).where(UsageDaily.day == DAY)).all()
        failed = session.scalars(
            select(DqResult).where(DqResult.day == DAY, DqResult.success.is_(False))
        ).all()
    assert aggregated == []  # the blocked date was not aggregated
    assert [f.check_name for f in failed] == ["volume_vs_same_weekday"]
    assert "FAILED" in Path(quality_pages.html_path(volume_drop.lake, DAY)).read_text()

    assert quality.accept(engine, DAY, "marketing paused traffic that day", who="oncall") == [
        "volume_vs_same_weekday"
    ]
    result = run_day(volume_drop, [DAY])
    assert DAY in result.aggregated
    with Session(engine) as session:
        acceptance = session.scalars(select(DqAcceptance)).one()
        assert session.execute(select(UsageDaily.day).where(UsageDaily.day == DAY)).first() is not None
    assert acceptance.accepted_by == "oncall" and acceptance.failed_checks == {
        "checks": ["volume_vs_same_weekday"]
    }


def test_run_day_flag_accepts_and_records(volume_drop):
    result = run_day(volume_drop, [DAY], accept_reason="known partial day")
    assert DAY in result.aggregated
    engine = make_engine(volume_drop.database_url)
    with engine.connect() as conn:
        assert conn.execute(select(DqAcceptance.reason)).scalars().all() == ["known partial day"]


def test_nothing_to_accept_is_a_clear_error(sqlite_settings):
    from pipelines.errors import UsageBillingError

    with pytest.raises(UsageBillingError, match="nothing to accept"):
        quality.accept(make_engine(sqlite_settings.database_url), DAY, "why not")


def test_error_level_checks_catch_bad_partitions(catalog, tmp_path):
    gen = generate(catalog, GeneratorConfig(start=DAY, days=1, accounts=50, events_per_day=400, seed=1))
    table = gen.events.drop_columns(["landing_date"])
    dup = pa.concat_tables([table, table.slice(0, 3)])  # a partition that somehow holds duplicates
    report = quality.Gate(catalog).validate(dup, DAY, (10, 10))
    assert set(report.failed_errors) == {"event_id_unique", "volume_vs_same_weekday"}
    assert report.blocked


def test_stored_details_are_strict_json():
    assert quality_gx._plain({"a": [float("nan"), 1.5, float("inf")], "b": (1, "x")}) == {
        "a": [None, 1.5, None],
        "b": [1, "x"],
    }


@pytest.mark.slow
def test_many_dates_are_validated_in_two_processes_or_on_the_cluster_with_the_same_outcomes(
    volume_drop, catalog, monkeypatch
):
    """A backfill's dates are split between worker processes, or are tasks on the run's cluster; every
    outcome equals the one-process run."""
    days = [DAY - dt.timedelta(days=7 * k) for k in (3, 2, 1)]
    engine = make_engine(volume_drop.database_url)

    def outcomes(reports):  # type: ignore[no-untyped-def]
        return [(r.day, r.rows, [(o.check.name, o.success, o.observed) for o in r.outcomes]) for r in reports]

    monkeypatch.setattr(quality, "PARALLEL_WORKERS", 1)
    serial = quality.check_partitions(engine, volume_drop.lake, catalog, days, "serial")
    monkeypatch.setattr(quality, "PARALLEL_WORKERS", 2)
    monkeypatch.setattr(quality, "PARALLEL_MIN_ROWS", 1)
    monkeypatch.setattr(quality, "BATCH_ROWS", 1)  # a batch per date
    spawned = []
    real = quality.concurrent.futures.ProcessPoolExecutor
    monkeypatch.setattr(
        quality.concurrent.futures, "ProcessPoolExecutor", lambda *a, **k: spawned.append(a) or real(*a, **k)
    )
    parallel = quality.check_partitions(engine, volume_drop.lake, catalog, days, "parallel")
    assert spawned and spawned[0][0] == 2
    assert outcomes(parallel) == outcomes(serial) and len(serial) == 3

    # On a cluster (the run's Dask executor; here one of threads, the same interface) each batch is a
    # task there, and nothing runs in local worker processes.
    spawned.clear()
    tasks = []

    class Cluster(concurrent.futures.ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def,override]
            tasks.append(args[2])  # the batches of partitions of the task
            return super().submit(fn, *args, **kwargs)

    with Cluster(2) as pool:
        remote = quality.check_partitions(engine, volume_drop.lake, catalog, days, "cluster", executor=pool)
    assert not spawned and sorted(len(batches) for batches in tasks)[:3] == [1, 1, 1]
    assert outcomes(remote) == outcomes(serial)


def test_one_run_over_many_partitions_gives_each_partition_its_own_outcomes(catalog, monkeypatch):
    """Partitions validated together get exactly the outcomes GX gives each alone: a duplicate
    within one partition fails only that one, the same id in two partitions fails neither, a bad
    value fails only its partition, and shares and volume are judged per partition; in frames of a
    few hundred rows (a large partition's), cut inside a partition's bad rows, the same outcomes
    and the same unexpected values."""
    import pyarrow.compute as pc

    def day_table(seed: int, n: int) -> pa.Table:
        config = GeneratorConfig(DAY, 1, 50, n, seed=seed, duplicate_rate=0, late_rate=0)
        gen = generate(catalog, config)
        return gen.events.drop_columns(["landing_date"])

    clean = day_table(1, 300)
    dup = pa.concat_tables([day_table(2, 300), day_table(2, 300).slice(0, 2)])
    shared = day_table(3, 300)
    shared = shared.set_column(
        0,
        "event_id",
        pc.if_else(pc.equal(pa.array(range(shared.num_rows)), 0), clean["event_id"][0], shared["event_id"]),
    )
    unknown = day_table(4, 300)
    unknown = unknown.set_column(
        unknown.schema.get_field_index("model"),
        "model",
        pc.if_else(pc.less(pa.array(range(unknown.num_rows)), 3), "gpt-0", unknown["model"]),
    )
    errors = day_table(5, 300)
    errors = errors.set_column(
        errors.schema.get_field_index("status"), "status", pa.array(["error"] * errors.num_rows)
    )
    tables = [clean, dup, shared, unknown, errors]
    days = [DAY + dt.timedelta(days=i) for i in range(len(tables))]
    histories = [(), (300, 300), (30, 30), (300, 310, 290), (300,)]
    gate = quality.Gate(catalog)
    alone = [gate.validate(t, d, h) for t, d, h in zip(tables, days, histories, strict=True)]
    parts = [quality_gx.Part(d, t.num_rows, h) for t, d, h in zip(tables, days, histories, strict=True)]
    together = gate.validate_many(pa.concat_tables(tables, promote_options="permissive"), parts)

    def seen(report):  # type: ignore[no-untyped-def]
        return [(o.check.name, o.success, o.observed) for o in report.outcomes]

    assert [seen(r) for r in together] == [seen(r) for r in alone]

    bad = sum(t.num_rows for t in tables[:3])  # the first row of an unknown model; two more follow
    monkeypatch.setattr(quality_gx, "CHUNK_ROWS", bad + 1)  # the second frame starts at the second
    chunked = gate.validate_many(pa.concat_tables(tables, promote_options="permissive"), parts)
    assert [(seen(r), [o.details for o in r.outcomes]) for r in chunked] == [
        (seen(r), [o.details for o in r.outcomes]) for r in together
    ]
    failed = {r.day: set(r.failed_errors) for r in together}
    assert failed == {
        days[0]: set(),
        days[1]: {"event_id_unique"},
        days[2]: {"volume_vs_same_weekday"},
        days[3]: {"model_known"},
        days[4]: set(),
    }
    warned = [o.check.name for o in together[4].outcomes if not o.success]
    assert warned == ["errors_below_10_percent"]
    model = next(o for o in together[3].outcomes if o.check.name == "model_known")
    assert model.observed == "3" and model.details["partial_unexpected_list"] == ["gpt-0"] * 3


def _browser() -> str:
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None or shutil.which("pdftotext") is None:
        pytest.fail("chromium and pdftotext are needed (.ci/run installs chromium and poppler-utils)")
    return browser


def _as_printed(page: Path, tmp_path: Path) -> str:
    """The text of ``page`` as Chromium lays it out (printed to PDF, read back with pdftotext)."""
    import subprocess

    pdf = tmp_path / f"{page.parent.name}.pdf"
    subprocess.run(
        [
            _browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-pdf-header-footer",
            f"--print-to-pdf={pdf}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    done = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], check=True, capture_output=True, text=True)
    return " ".join(done.stdout.split())


@pytest.mark.slow
def test_the_pages_show_expected_values_the_acceptance_and_every_date(volume_drop, tmp_path):
    import subprocess

    from PIL import Image

    with pytest.raises(DataQualityError):
        run_day(volume_drop, [DAY])
    engine = make_engine(volume_drop.database_url)
    quality.accept_and_render(engine, volume_drop.lake, DAY, "marketing paused traffic that day", "oncall")

    page = Path(quality_pages.html_path(volume_drop.lake, DAY))
    text = _as_printed(page, tmp_path)
    assert "Gate: accepted" in text and "120 rows" in text
    assert (
        "between 333 and 3,000 rows: the median 1,000 of the 3 previous partitions of the same weekday"
        in text
    )
    assert "oncall accepted volume_vs_same_weekday on " in text
    assert "marketing paused traffic that day" in text
    assert "PARAMETER" not in text and "{" not in text
    assert "model is one of gpt-" in text  # each check says what it expected

    index = _as_printed(Path(quality_pages.index_path(volume_drop.lake)), tmp_path)
    dates = [str(DAY - dt.timedelta(days=7 * k)) for k in (0, 1, 2, 3)]  # newest first
    assert [index.index(d) for d in dates] == sorted(index.index(d) for d in dates)
    assert "4 dates checked: 1 accepted, 3 passed" in index
    assert "oncall:" in index and "marketing paused traffic that day" in index, index

    shot = tmp_path / "page.png"
    subprocess.run(
        [
            _browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={shot}",
            "--window-size=1200,1400",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    colors = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20)
    failed_row = sum(n for n, rgb in colors if rgb == (255, 221, 221))  # the failed check's row, #fdd
    accepted = sum(n for n, rgb in colors if rgb == (232, 240, 254))  # the acceptance box, #e8f0fe
    assert failed_row > 2000 and accepted > 5000, (failed_row, accepted)


def test_run_day_stopped_at_the_gate_still_says_what_it_ingested(volume_drop, capsys):
    from pipelines.cli import main

    code = main([*cli_args(volume_drop), "run-day", "--date", str(DAY)])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.startswith("error: data-quality gate failed for 2026-03-23")
    assert "read 120 rows: clean 120" in captured.out  # the ingest summary comes first
    assert "stopped by the data-quality gate: 2026-03-23" in captured.out
