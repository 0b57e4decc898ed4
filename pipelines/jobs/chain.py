"""The daily and monthly chains: the one ordered list of steps that ``run-day``, the demo and the
Airflow DAGs all run.

    DAILY:   ingest -> quality_gate -> aggregate -> meter -> effectiveness
    MONTHLY: remeter -> draft -> reconcile -> finalize -> export

A step is a function ``(context, state) -> state`` (``jobs/steps.py``): it takes the runtime context
of the command and what the steps before it found (a ``DayState`` or ``MonthState``), runs one stage
and returns the state with what it did. ``run-day`` and the demo call ``run_chain`` with one context;
each DAG makes one task per step, named as the step, and passes the state between tasks as XCom
(``to_json``/``from_json``). Adding a step is one entry here and one function in ``steps.py``.

The DAG files import this module when they are parsed: it imports nothing of the pipeline itself (a
step's function is imported when the step runs).
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pipelines.settings import step_times_file

State = TypeVar("State")


@dataclass(frozen=True)
class Step:
    """One step of a chain: its ``name`` (the DAG task's id), the ``module:function`` it runs, whether a
    failure needs a person rather than a retry (``gate``), and the Airflow asset it publishes."""

    name: str
    target: str
    gate: bool = False
    publishes: str | None = None

    def function(self) -> Callable[[Any, Any], Any]:
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)


DAILY: tuple[Step, ...] = (
    Step("ingest", "pipelines.jobs.steps:ingest"),
    Step("quality_gate", "pipelines.jobs.steps:quality_gate", gate=True),
    Step("aggregate", "pipelines.jobs.steps:aggregate"),
    Step("meter", "pipelines.jobs.steps:meter", publishes="usage_daily"),
    Step("effectiveness", "pipelines.jobs.steps:effectiveness"),
)

MONTHLY: tuple[Step, ...] = (
    Step("remeter", "pipelines.jobs.steps:remeter"),
    Step("draft", "pipelines.jobs.steps:draft"),
    Step("reconcile", "pipelines.jobs.steps:reconcile", gate=True),
    Step("finalize", "pipelines.jobs.steps:finalize"),
    Step("export", "pipelines.jobs.steps:export"),
)


def step_named(chain: Sequence[Step], name: str) -> Step:
    for step in chain:
        if step.name == name:
            return step
    raise KeyError(f"no step {name!r} in the chain: {', '.join(s.name for s in chain)}")


def run_chain(
    chain: Sequence[Step],
    context: Any,
    state: State,
    on_step: Callable[[str], None] | None = None,
    until: str | None = None,
) -> State:
    """Run the steps of ``chain`` in order on ``state`` (up to and including ``until``); ``on_step`` is
    told each step's name as it starts. With ``USAGE_BILLING_STEP_TIMES`` set to a file, each step
    appends a JSON line to it: its name and the wall-clock seconds (Unix time) it started and ended,
    so that a profiler sampling the processes of a run can tell which step used what."""
    times = step_times_file()
    for step in chain:
        if on_step is not None:
            on_step(step.name)
        started = time.time()
        state = step.function()(context, state)
        if times:
            with open(times, "a") as handle:
                handle.write(json.dumps({"step": step.name, "start": started, "end": time.time()}) + "\n")
        if step.name == until:
            break
    return state
