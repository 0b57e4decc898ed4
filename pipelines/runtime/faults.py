"""Fault injection for the crash tests: named checkpoints a test can turn into a SIGKILL or a pause.

Production runs never set ``USAGE_BILLING_FAULT``; then ``checkpoint`` is one dictionary lookup.
A test sets ``USAGE_BILLING_FAULT=<checkpoint>:<action>[:<nth>]`` in a child process's environment:

- ``kill``: the process sends itself SIGKILL at the nth time it reaches the checkpoint (default 1st),
  the way an out-of-memory killer or a lost machine ends a run: no cleanup, no ``finally``.
- ``pause``: at that point the process creates the file named by ``USAGE_BILLING_FAULT_FILE`` and
  waits until the file is removed (the test kills a database connection meanwhile, say).

Checkpoints: ``lake.write`` (after each Parquet file a run writes into its staging),
``lake.commit`` (after each partition swap of an ingest commit), ``lake.manifest`` (an object-store
commit's files copied, its manifest not yet replaced),
``warehouse.load.<table>`` (rows inserted, transaction still open), ``invoices.finalize`` (numbers
given, not committed), ``notify.sent`` (a round of notifications sent, not yet marked sent).
"""

from __future__ import annotations

import os
import signal
import time

_seen: dict[str, int] = {}


def checkpoint(name: str) -> None:
    spec = os.environ.get("USAGE_BILLING_FAULT")
    if not spec:
        return
    point, _, rest = spec.partition(":")
    if point != name:
        return
    action, _, nth = rest.partition(":")
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] != int(nth or 1):
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "pause":
        flag = os.environ["USAGE_BILLING_FAULT_FILE"]
        with open(flag, "w") as handle:
            handle.write(str(os.getpid()))
        while os.path.exists(flag):
            time.sleep(0.05)
