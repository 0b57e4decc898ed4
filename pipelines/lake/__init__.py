"""The lake: Parquet partitions ``<lake>/<dataset>/date=YYYY-MM-DD/*.parquet``, written into a run's
staging folder and committed atomically. Callers use ``from pipelines import lake`` and ``lake.<name>``;
the names live in ``paths`` (paths, listing, JSON), ``parquet`` (encoding, writes, scans, read units),
``spill`` (Arrow IPC and NumPy spill files) and ``commit`` (staging, commit, recovery, lake metadata).
"""

from pipelines.lake.commit import (  # noqa: F401
    STAGE_MARKER,
    commit,
    discard,
    ingest_lock,
    lake_meta,
    open_stage,
    recover,
    shard_count,
    stages_of,
)
from pipelines.lake.parquet import (  # noqa: F401
    UNIT_ROWS,
    ParquetAppender,
    Unit,
    _parquet_options,
    dataset_files,
    open_parquet,
    read_parquet,
    read_unit,
    row_group_units,
    row_groups,
    scan,
    write_parquet,
)
from pipelines.lake.paths import (  # noqa: F401
    _OLD,
    ARROW_SCHEMA_KEY,
    DEFAULT_SHARDS,
    EVENTS,
    META_FILE,
    QUARANTINE,
    STAGING,
    create_object,
    exists,
    folder_exists,
    io_errors,
    is_local,
    join,
    list_files,
    list_folders,
    objects_under,
    open_object,
    partition,
    partition_dates,
    read_json,
    staging,
    stamps,
    write_json,
    writing,
)
from pipelines.lake.spill import (  # noqa: F401
    IpcSegments,
    read_ipc_batches,
    read_npy,
    write_ipc_segments,
    write_npy,
)
