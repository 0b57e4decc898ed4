"""What benchmarks/cluster.py measures with: each process's CPU and memory over a run, step by step,
and what the machine itself charges for two processes working at once."""

from __future__ import annotations

import statistics
import subprocess
import threading
import time
from pathlib import Path


class Peaks:
    """Samples the resident memory and CPU seconds of named processes (with their children) every
    100 ms, keeping every sample: what each step of the run used is read off between its start and end
    (``by_step``)."""

    def __init__(self, processes: dict[str, int]) -> None:
        import psutil

        self.procs = {name: psutil.Process(pid) for name, pid in processes.items()}
        self.samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in processes}
        for name, proc in self.procs.items():
            self._take(name, proc)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _take(self, name: str, proc) -> None:  # type: ignore[no-untyped-def]
        import psutil

        try:
            tree = [proc, *proc.children(recursive=True)]
            live = [p for p in tree if p.is_running()]
            cpu = sum(sum(p.cpu_times()[:2]) for p in live)
            rss = sum(p.memory_info().rss for p in live)
        except psutil.Error:
            return
        self.samples[name].append((time.time(), cpu, rss))

    def _sample(self) -> None:
        while not self._stop.is_set():
            for name, proc in self.procs.items():
                self._take(name, proc)
            time.sleep(0.1)

    @property
    def peak(self) -> dict[str, int]:
        return {name: max((r for _, _, r in s), default=0) for name, s in self.samples.items()}

    def cpu_used(self) -> dict[str, float]:
        return {name: (s[-1][1] - s[0][1]) if s else 0.0 for name, s in self.samples.items()}

    def by_step(self, steps: list[dict]) -> dict[str, dict[str, tuple[float, int]]]:  # type: ignore[type-arg]
        """{step: {process: (CPU seconds, peak resident bytes)}} from the samples inside each step."""
        out: dict[str, dict[str, tuple[float, int]]] = {}
        for step in steps:
            out[step["step"]] = {}
            for name, samples in self.samples.items():
                inside = [x for x in samples if step["start"] <= x[0] <= step["end"]]
                before = [x for x in samples if x[0] < step["start"]][-1:]
                window = before + inside
                cpu = window[-1][1] - window[0][1] if len(window) > 1 else 0.0
                out[step["step"]][name] = (cpu, max((r for _, _, r in window), default=0))
        return out

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for name, proc in self.procs.items():
            self._take(name, proc)


def probe_work(path: str) -> float:
    """CPU seconds of a fixed piece of Arrow work like the pipelines' own (a landing file's partial usage
    sums and a sort by account and time, three times), in this process."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.usage.partials import partial_usage

    table = pq.read_table(path)
    start = time.process_time()
    for _ in range(3):
        partial_usage(table)
        table.take(pc.sort_indices(table, [("account_id", "ascending"), ("event_time", "ascending")]))
    return time.process_time() - start


def contention_of(workdir: Path) -> tuple[float, float]:
    """The machine's own price of running two processes at once: ``probe_work`` alone, then in two
    processes at the same time (CPU seconds, the median of each). Two workers of one thread each on
    two cores pay it on the work they do at the same time; the embedded run pays it where its threads
    overlap."""
    import sys

    path = str(sorted((workdir / "landing").rglob("*.parquet"))[0])
    argv = [sys.executable, "-c", f"from benchmarks.cluster_measure import probe_work; print(probe_work({path!r}))"]
    alone = [float(subprocess.run(argv, capture_output=True, text=True, check=True).stdout) for _ in range(2)]
    pairs: list[float] = []
    for _ in range(2):
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        pairs += [float(proc.communicate()[0]) for proc in procs]
    return statistics.median(alone), statistics.median(pairs)
