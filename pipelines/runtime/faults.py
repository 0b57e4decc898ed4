"""Fault injection for the crash tests: named checkpoints a test can turn into a SIGKILL or a pause.

Production runs never set ``USAGE_BILLING_FAULT``; then ``checkpoint`` is one dictionary lookup.
A test sets ``USAGE_BILLING_FAULT=<checkpoint>:<action>[:<nth>]`` in a child process's environment:

- ``kill``: the process sends itself SIGKILL at the nth time it reaches the checkpoint (default 1st),
  the way an out-of-memory killer or a lost machine ends a run: no cleanup, no ``finally``.
- ``kill-once``: the same, but only in the first process of all that reaches it: it creates the file
  ``<USAGE_BILLING_FAULT_FILE>.<checkpoint>`` (its pid and a stack of where it was), and a process that
  finds the file goes on. A Dask worker killed this way is restarted by its nanny, and the tasks it ran
  or whose results it held run again, as after a lost machine.
- ``pause``: at that point the process creates the file named by ``USAGE_BILLING_FAULT_FILE`` and
  waits until the file is removed (the test kills a database connection meanwhile, say).

Checkpoints: ``lake.write`` (after each Parquet file a run writes into its staging),
``lake.commit`` (after each partition swap of an ingest commit), ``lake.manifest`` (an object-store
commit's files copied, its manifest not yet replaced),
``warehouse.load.<table>`` (rows inserted, transaction still open), ``invoices.finalize`` (numbers
given, not committed), ``notify.sent`` (a round of notifications sent, not yet marked sent). In a
pipeline's tasks (the Dask workers' processes on a cluster), after each task's side effects:
``ingest.staged`` (a shard's files staged), ``gate.checked`` (a batch of partitions validated),
``aggregate.staged`` (a day's tables staged), ``meter.spilled`` (a read unit spilled by shard),
``meter.staged`` (a shard's table staged), ``effectiveness.staged`` (a week's tables staged).
``USAGE_BILLING_FAULT`` may name several checkpoints, comma-separated.
"""

from __future__ import annotations

import os
import signal
import time
import traceback

_seen: dict[str, int] = {}


def checkpoint(name: str) -> None:
    specs = os.environ.get("USAGE_BILLING_FAULT")
    if not specs:
        return
    for spec in specs.split(","):
        point, _, rest = spec.partition(":")
        if point == name:
            _act(name, *rest.partition(":")[::2])


def _act(name: str, action: str, nth: str) -> None:
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] != int(nth or 1):
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "kill-once":
        path = f"{os.environ['USAGE_BILLING_FAULT_FILE']}.{name}"
        try:
            marker = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(marker, f"{os.getpid()}\n{''.join(traceback.format_stack(limit=12))}".encode())
        os.close(marker)
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "pause":
        flag = os.environ["USAGE_BILLING_FAULT_FILE"]
        with open(flag, "w") as handle:
            handle.write(str(os.getpid()))
        while os.path.exists(flag):
            time.sleep(0.05)
