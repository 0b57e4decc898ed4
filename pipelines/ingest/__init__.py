"""events ingest: read landing files, validate, quarantine, deduplicate, commit, the quality gate."""
