"""The lake: Parquet partitions ``<lake>/<dataset>/date=YYYY-MM-DD/*.parquet``, written into a run's
staging folder and committed atomically. Callers use ``from pipelines import lake`` and ``lake.<name>``;
the names live in ``paths`` (paths, listing, JSON), ``parquet`` (encoding, writes, scans, read units),
``spill`` (Arrow IPC and NumPy spill files) and ``commit`` (staging, commit, recovery, lake metadata).
Only the names callers use are here; a test that changes a module's constant patches that module
(``lake.parquet.UNIT_ROWS``), since a name re-exported here is a copy of the binding.
"""

from pipelines.lake.commit import (  # noqa: F401
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
    ParquetAppender,
    Unit,
    dataset_files,
    open_parquet,
    read_parquet,
    read_parquet_files,
    read_unit,
    row_group_units,
    row_groups,
    scan,
    write_parquet,
)
from pipelines.lake.paths import (  # noqa: F401
    EVENTS,
    META_FILE,
    OUTCOMES,
    QUARANTINE,
    STAGING,
    create_object,
    exists,
    folder_exists,
    is_local,
    join,
    list_files,
    list_folders,
    open_object,
    partition,
    partition_dates,
    partition_file,
    read_json,
    staging,
    stamps,
    write_bytes,
    write_json,
)
from pipelines.lake.spill import (  # noqa: F401
    READ_BATCH_BYTES,
    CarriedSegment,
    IpcSegments,
    Segment,
    carried_segments,
    in_batches,
    ipc_segments,
    read_ipc_buffer,
    read_ipc_segment,
    read_ipc_segments,
    read_npy,
    write_ipc_segments,
    write_npy,
)
