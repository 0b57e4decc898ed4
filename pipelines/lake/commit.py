"""Staged runs and the atomic commit.

Writers never write into a live partition: a pipeline writes into ``<lake>/_staging/<run_id>/``, and
``commit`` swaps each staged partition in after the pipeline succeeded. On a local disk the swap is
two directory renames (old aside, new in), and ``recover`` repairs a swap that a crash interrupted,
so a reader sees either the old partition or the new one, never a mix. An object store has no
rename, atomic or not: there a partition is a manifest (``_manifest.json``) naming its files, and a
commit writes new files beside the old ones and then replaces the manifest in one object write
(``_commit_manifest``). Also the lake's metadata file (its identity and shard count).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import uuid

from apache_beam.io.filesystems import FileSystems

from pipelines.errors import UsageBillingError
from pipelines.lake import objects
from pipelines.lake.paths import (
    _OLD,
    DEFAULT_SHARDS,
    MANIFEST,
    META_FILE,
    STAGING,
    exists,
    folder_exists,
    io_errors,
    is_local,
    join,
    list_files,
    list_folders,
    manifest_files,
    objects_under,
    read_json,
    staging,
    write_json,
)
from pipelines.runtime import faults

# -- lake metadata ----------------------------------------------------------------------------


def lake_meta(lake: str) -> dict | None:
    """The lake's ``_lake.json`` (its identity and shard count), None where there is no lake."""
    meta_path = join(lake, META_FILE)
    if not exists(meta_path):
        return None
    try:
        meta = read_json(meta_path)
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise UsageBillingError(f"{meta_path} is not a lake's metadata file (not a JSON object)")
    return meta


def shard_count(lake: str, requested: int | None = None) -> int:
    """The lake's dedup shard count: fixed when the lake is created, so shard files line up."""
    meta_path = join(lake, META_FILE)
    if exists(meta_path):
        shards = int(read_json(meta_path)["shards"])
        if requested is not None and requested != shards:
            raise UsageBillingError(f"the lake at {lake} uses {shards} shards; --shards {requested} differs")
        return shards
    shards = requested or DEFAULT_SHARDS
    if not 1 <= shards <= 4096:
        raise UsageBillingError(f"--shards must be between 1 and 4096, got {shards}")
    write_json(meta_path, {"format_version": 1, "shards": shards, "lake_id": str(uuid.uuid4())})
    return shards


FILES = "_files"  # where an object-store partition's committed files are stored, a folder per commit
STAGE_MARKER = "_run.json"  # names the step that owns a staging folder


@io_errors
def open_stage(lake: str, run_id: str, step: str) -> str:
    """The staging folder of a run of ``step``, marked so that a later run can clean up after it."""
    stage = staging(lake, run_id)
    write_json(join(stage, STAGE_MARKER), {"step": step, "run_id": run_id})
    return stage


def stages_of(lake: str, step: str) -> list[str]:
    """Staging folders of runs of ``step``. Called under the step's lock, they are from runs that
    died (SIGKILL, a lost machine): no running run of the step owns one."""
    out = []
    for stage in list_folders(join(lake, STAGING)):
        marker = join(stage, STAGE_MARKER)
        if exists(marker) and read_json(marker).get("step") == step:
            out.append(stage)
    return out


def ingest_lock(lake: str) -> str:
    """The name of the lock every ingest into ``lake`` holds (and any step that repairs its swaps)."""
    return f"events ingest into {lake}"


# -- atomic commit ----------------------------------------------------------------------------


def _delete_tree(path: str) -> None:
    if is_local(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        objects = objects_under(path)
        if objects:
            FileSystems.delete(objects)


def recover(lake: str, dataset: str) -> None:
    """Finish or undo partition swaps that a crash interrupted (local lakes)."""
    root = join(lake, dataset)
    if not is_local(root) or not os.path.isdir(root):
        return
    for name in os.listdir(root):
        if _OLD not in name:
            continue
        final = join(root, name.split(_OLD)[0])
        old = join(root, name)
        if os.path.isdir(final):
            shutil.rmtree(old, ignore_errors=True)  # the swap finished; the old copy was not yet removed
        else:
            os.rename(old, final)  # crashed between the two renames: put the old partition back


@io_errors
def commit(staged_dir: str, final_dir: str, run_id: str, carry_over: bool = False) -> None:
    """Make ``staged_dir`` the content of ``final_dir``.

    With ``carry_over``, files of the current partition that the staged one lacks (by name) are kept:
    a run that rewrote only some shards of a date still commits the whole date at once. A staged
    folder that does not exist commits an empty partition.
    """
    if not is_local(staged_dir):
        _commit_manifest(staged_dir, final_dir, run_id, carry_over)
        return
    os.makedirs(staged_dir, exist_ok=True)
    if carry_over and folder_exists(final_dir):
        staged_names = {posixpath.basename(p) for p in list_files(staged_dir, "*")}
        for path in list_files(final_dir, "*"):
            name = posixpath.basename(path)
            if name not in staged_names:
                target = join(staged_dir, name)
                os.link(path, target) if _same_device(path, staged_dir) else shutil.copy2(path, target)
    os.makedirs(os.path.dirname(final_dir), exist_ok=True)
    old = f"{final_dir}{_OLD}{run_id}"
    had_old = os.path.isdir(final_dir)
    if had_old:
        os.rename(final_dir, old)
    os.rename(staged_dir, final_dir)
    if had_old:
        shutil.rmtree(old, ignore_errors=True)


def _commit_manifest(staged_dir: str, final_dir: str, run_id: str, carry_over: bool) -> None:
    """An object store's commit: the staged files are copied under a folder of their own in the
    partition (``_files/<commit>/``, where no reader looks), then the partition's manifest, which names
    its files, is replaced in one object write: a reader that lists the partition through the manifest
    sees the old files or the new ones. A commit killed before that write leaves the old manifest and
    its files as they were. The files no manifest names any more are deleted last; those of the manifest
    just replaced stay until the partition's next commit, for readers that had read it."""
    old = manifest_files(final_dir)
    if not old:  # a partition committed before manifests (or none): its files are its direct objects
        old = {posixpath.basename(p): p for p in list_files(final_dir, "*")}
    commit_id = f"{run_id}-{uuid.uuid4().hex[:8]}"
    version = join(final_dir, FILES, commit_id)
    staged = {posixpath.basename(p): p for p in list_files(staged_dir, "*")}
    if staged:
        names = sorted(staged)
        sources, targets = [staged[n] for n in names], [join(version, n) for n in names]
        if objects.handles(version):
            objects.copy(sources, targets)
        else:
            FileSystems.copy(sources, targets)
    files = {n: f"{FILES}/{commit_id}/{n}" for n in staged}
    if carry_over:
        prefix = join(final_dir, "")
        for name, path in old.items():
            if name not in files:
                files[name] = path[len(prefix) :] if path.startswith(prefix) else path
    faults.checkpoint("lake.manifest")
    write_json(
        join(final_dir, MANIFEST),
        {"format_version": 1, "commit": commit_id, "run_id": run_id, "files": dict(sorted(files.items()))},
    )
    keep = {join(final_dir, MANIFEST), *(join(final_dir, f) for f in files.values()), *old.values()}
    stale = [p for p in objects_under(final_dir) if p not in keep]
    if stale:
        FileSystems.delete(stale)
    _delete_tree(staged_dir)


def _same_device(a: str, b: str) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def discard(staged_dir: str) -> None:
    _delete_tree(staged_dir)
