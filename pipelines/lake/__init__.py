"""The lake: Parquet partitions ``<lake>/<dataset>/date=YYYY-MM-DD/*.parquet``, written into a run's
staging folder and committed atomically. Callers use ``from pipelines import lake`` and ``lake.<name>``;
the names live in ``paths`` (paths, listing, JSON), ``parquet`` (encoding, writes, scans, read units),
``spill`` (Arrow IPC and NumPy spill files) and ``commit`` (staging, commit, recovery, lake metadata).
"""

from pipelines.lake.paths import (  # noqa: F401
    EVENTS,
    QUARANTINE,
    STAGING,
    META_FILE,
    DEFAULT_SHARDS,
    _OLD,
    ARROW_SCHEMA_KEY,
    writing,
    io_errors,
    is_local,
    join,
    partition,
    staging,
    open_object,
    create_object,
    exists,
    objects_under,
    folder_exists,
    list_folders,
    list_files,
    stamps,
    partition_dates,
    write_json,
    read_json,
)

from pipelines.lake.parquet import (  # noqa: F401
    DICTIONARY_COLUMNS,
    _parquet_options,
    write_parquet,
    ParquetAppender,
    open_parquet,
    read_parquet,
    dataset_files,
    scan,
    row_groups,
    UNIT_ROWS,
    Unit,
    row_group_units,
    read_unit,
)

from pipelines.lake.spill import (  # noqa: F401
    write_ipc_segments,
    read_ipc_batches,
    IpcSegments,
    write_npy,
    read_npy,
)

from pipelines.lake.commit import (  # noqa: F401
    lake_meta,
    shard_count,
    STAGE_MARKER,
    open_stage,
    stages_of,
    ingest_lock,
    recover,
    commit,
    discard,
)
