"""The runtime context of one command: what every stage it runs works with, built once.

A command (the CLI, a ``python -m`` entry point, an Airflow task) turns its flags and environment into
frozen ``Settings`` and Beam's own flags, opens one ``RunContext`` and hands it to each stage it runs:

    with RunContext.open(settings, beam_args) as context:
        aggregate.run(context, dates)
        meter.run(context, dates)

The context builds the warehouse engine, the catalog and the Beam options once, on first use, and
disposes of the engine when the command ends. Stages never parse flags or read the environment; they
take the context, the dates and their own typed options.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pipelines.errors import UsageBillingError
from pipelines.settings import DEFAULT_CONFIG, DEFAULT_DATABASE_URL, DEFAULT_LAKE, DEFAULT_LANDING, Settings
from pipelines.warehouse.engine import require_schema, warehouse_engine
from schemas.limits import RUN_ID

if TYPE_CHECKING:  # the DAG files import the chain, which imports this module, at parse time
    from apache_beam.options.pipeline_options import PipelineOptions
    from sqlalchemy import Engine

    from schemas.catalog import Catalog


@dataclass(frozen=True)
class RunContext:
    """One command's settings and Beam flags, and the engine, catalog and Beam options built from them."""

    settings: Settings
    beam_args: tuple[str, ...] = ()
    _options: dict[bool, PipelineOptions] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    @contextlib.contextmanager
    def open(cls, settings: Settings, beam_args: Iterable[str] | None = None) -> Iterator[RunContext]:
        """A context for one command; the lake and landing roots are checked to be reachable first
        (one line when a bucket does not answer), and its engine is disposed of at the end."""
        from pipelines.lake.paths import check_reachable, use_filesystem_options  # lazy: apache_beam

        context = cls(settings, tuple(settings.beam_args if beam_args is None else beam_args))
        use_filesystem_options(list(context.beam_args))  # the driver's own lake access uses them too
        for root in (settings.lake, settings.landing):
            check_reachable(root)
        try:
            yield context
        finally:
            context.close()

    @cached_property
    def catalog(self) -> Catalog:
        return self.settings.catalog

    @cached_property
    def engine(self) -> Engine:
        """The warehouse's engine, its schema checked to be at the migrations' head."""
        engine = warehouse_engine(self.settings)
        try:
            require_schema(engine)
        except BaseException:
            engine.dispose()
            raise
        return engine

    def beam_options(self, threads: bool = False) -> PipelineOptions:
        """Beam options of a pipeline run (``threads``: a step whose default is a thread per core)."""
        if threads not in self._options:
            from pipelines.runtime.options import pipeline_options  # lazy: apache_beam

            self._options[threads] = pipeline_options(list(self.beam_args), threads)
        return self._options[threads]

    def cluster(self) -> contextlib.AbstractContextManager[concurrent.futures.Executor | None]:
        """``with context.cluster() as executor:`` a step's own Python work on the run's Dask cluster
        (None: the run names none, the work stays in this process)."""
        from pipelines.runtime.options import cluster  # lazy: apache_beam

        return cluster(self.beam_options())

    @property
    def lake(self) -> str:
        return self.settings.lake

    def close(self) -> None:
        if "engine" in self.__dict__:
            self.engine.dispose()


@dataclass(frozen=True)
class StepOptions:
    """What every stage's ``run(context, dates, options)`` takes besides the dates: the run's id
    (generated when None). A stage's own options extend it."""

    run_id: str | None = None

    def __post_init__(self) -> None:
        if self.run_id is not None and not RUN_ID.fullmatch(self.run_id):
            raise UsageBillingError(
                f"--run_id {self.run_id[:80]!r} is not a run id: "
                "letters, digits, '.', '_' and '-', at most 64"
            )


def split_argv(argv: list[str] | None, *flags: Any) -> tuple[Settings, argparse.Namespace, list[str]]:
    """An argument list at an edge (a script, a test, the extra arguments of a command): the settings
    of its ``--config``/``--database_url``/``--lake``/``--landing``, the step's own flags (dates and
    ``--run_id``, and ``flags``: ``--shards``, ...) and what is left, Beam's own flags."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_common_flags(parser)
    for cls in flags:  # a step's own flags: a Beam options class (Beam must know them too)
        cls._add_argparse_args(parser)
    known, rest = parser.parse_known_args(list(argv or []))
    settings = Settings(
        config=known.config, database_url=known.database_url, lake=known.lake, landing=known.landing
    )
    return settings, known, rest


def add_common_flags(parser: Any) -> None:
    """Where things live, the dates and the run id, as flags."""
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="catalog TOML")
    parser.add_argument("--database_url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--lake", default=DEFAULT_LAKE)
    parser.add_argument("--landing", default=DEFAULT_LANDING)
    parser.add_argument("--date", default=None, help="one date, YYYY-MM-DD")
    parser.add_argument("--from", dest="from_date", default=None, help="first date of a range")
    parser.add_argument("--to", dest="to_date", default=None, help="last date of a range")
    parser.add_argument("--run_id", default=None, help="id of this run (default: generated)")
