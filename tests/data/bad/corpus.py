"""The bad-input corpus: each case is one landing file and the outcome ingest must produce.

Every JSON case also carries one good row, so a test can show that valid rows beside bad ones still
arrive. ``python -m tests.data.bad.corpus`` rewrites the small example files in this folder; the
10 MB single line is only generated into temporary folders (``write(folder, big=True)``).
"""

from __future__ import annotations

import gzip
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

DAY = "2026-03-02"
HERE = Path(__file__).resolve().parent


def event(eid: str, **over: object) -> dict:
    base = {"event_id": eid, "event_time": f"{DAY}T10:00:00Z", "account_id": "acct-bad-corpus",
            "user_id": "u-1", "model": "gpt-5.6-sol", "speed_tier": "standard", "input_tokens": 1200,
            "cached_input_tokens": 200, "output_tokens": 300, "duration_ms": 4000, "status": "ok",
            "error_code": None}
    base.update(over)
    return {k: v for k, v in base.items() if v is not _DROP}


_DROP = object()
# Each names the same customer as a canonical id to a person's eye; none may become a second customer.
LOOKALIKES = (" acct-bad-corpus", "acct-bad-corpus ", "acct-bad\u200b-corpus", "acct-bad-corpus\uff11",
              "ACCT-bad-corpus", "acct-bad-corpu\u0073\u0301", "acct\u00a0bad", "acct-bad\u2028x")


def line(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def ce(eid: object, data: dict, spec: object = "1.0") -> dict:
    out = {"specversion": spec, "type": "com.example.usage", "source": "/gateway", "time": f"{DAY}T10:00:00Z",
           "datacontenttype": "application/json", "data": data}
    if eid is not None:
        out["id"] = eid
    return {k: v for k, v in out.items() if v is not _DROP}


def _data(eid: str) -> dict:
    return {k: v for k, v in event(eid).items() if k not in ("event_id", "event_time")}


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


@dataclass(frozen=True)
class Case:
    name: str  # the file name in the landing folder
    kind: str  # what is wrong, in words
    content: bytes
    quarantined: dict[str, int] = field(default_factory=dict)  # reason -> rows
    clean: int = 0
    duplicates: int = 0
    big: bool = False  # generated only into temporary folders
    special: str | None = None  # "symlink" | "fifo" | "folder": an entry that is not a regular file
    recorded: str | None = None  # the name the quarantine and the lake record, when it is not ``name``


def _jsonl(name: str, kind: str, bad: list[bytes], reasons: dict[str, int], **kw) -> Case:  # type: ignore[no-untyped-def]
    tag = name.split(".")[0]
    good = line(event(f"{tag}-good"))
    return Case(name, kind, b"\n".join([good, *bad]) + b"\n", reasons, clean=kw.pop("clean", 1), **kw)


def cases() -> list[Case]:
    good_table = pa.Table.from_pylist([event("parquet-good-1"), event("parquet-good-2")])
    gz_good = gzip.compress(b"\n".join(line(event(f"trunc-{i}")) for i in range(2000)), mtime=0)
    return [
        _jsonl("malformed_json.jsonl", "a line that is not JSON", [b'{"event_id": "m1", "account_id": '],
               {"malformed_json": 1}),
        _jsonl("tokens_as_text.jsonl", "a token count sent as a string", [line(event("w1", input_tokens="12"))],
               {"wrong_type": 1}),
        _jsonl("tokens_as_float.jsonl", "a fractional token count", [line(event("w2", output_tokens=1.5))],
               {"wrong_type": 1}),
        _jsonl("tokens_as_object.jsonl", "an object where a number belongs",
               [line(event("w3", input_tokens={"n": 1}))], {"wrong_type": 1}),
        _jsonl("status_as_bool.jsonl", "a boolean where a string belongs", [line(event("w4", status=True))],
               {"wrong_type": 1}),
        _jsonl("missing_event_id.jsonl", "no event_id", [line(event("x", event_id=_DROP))], {"missing_event_id": 1}),
        _jsonl("empty_event_id.jsonl", "an empty event_id", [line(event(""))], {"empty_event_id": 1}),
        _jsonl("missing_account.jsonl", "no account_id", [line(event("ma", account_id=_DROP))],
               {"missing_account_id": 1}),
        _jsonl("missing_time.jsonl", "no event_time", [line(event("mt", event_time=_DROP))],
               {"missing_event_time": 1}),
        _jsonl("missing_output_tokens.jsonl", "no output_tokens", [line(event("mo", output_tokens=_DROP))],
               {"missing_output_tokens": 1}),
        _jsonl("negative_tokens.jsonl", "negative tokens", [line(event("nt", output_tokens=-5))],
               {"negative_tokens": 1}),
        _jsonl("absurd_tokens.jsonl", "a trillion tokens in one request",
               [line(event("at", input_tokens=10**12, cached_input_tokens=0))], {"tokens_out_of_range": 1}),
        _jsonl("cached_exceeds_input.jsonl", "more cached than input tokens",
               [line(event("ce", input_tokens=10, cached_input_tokens=11))], {"cached_exceeds_input": 1}),
        _jsonl("unknown_model.jsonl", "a model not in the catalog", [line(event("um", model="gpt-4o"))],
               {"unknown_model": 1}),
        _jsonl("unknown_tier.jsonl", "a speed tier that does not exist", [line(event("ut", speed_tier="warp"))],
               {"unknown_speed_tier": 1}),
        _jsonl("unknown_status.jsonl", "a status that does not exist", [line(event("us", status="maybe"))],
               {"unknown_status": 1}),
        _jsonl("naive_timestamp.jsonl", "a timestamp without timezone",
               [line(event("nz", event_time=f"{DAY}T10:00:00"))], {"naive_event_time": 1}),
        _jsonl("impossible_date.jsonl", "February 30th", [line(event("fd", event_time="2026-02-30T10:00:00Z"))],
               {"bad_event_time": 1}),
        _jsonl("unparseable_time.jsonl", "a timestamp in words", [line(event("ut2", event_time="yesterday noon"))],
               {"bad_event_time": 1}),
        _jsonl("far_future.jsonl", "an event from next year", [line(event("ff", event_time="2027-03-02T10:00:00Z"))],
               {"future_event": 1}),
        _jsonl("ancient.jsonl", "an event older than the lateness window",
               [line(event("an", event_time="2025-01-01T10:00:00Z"))], {"no_price,too_late": 1}),
        _jsonl("negative_duration.jsonl", "a negative duration", [line(event("nd", duration_ms=-1))],
               {"negative_duration": 1}),
        _jsonl("long_account_id.jsonl", "a 10 kB account id", [line(event("la", account_id="a" * 10_000))],
               {"value_too_long": 1}),
        _jsonl("not_an_object.jsonl", "a JSON array on a line", [b"[1, 2, 3]"], {"not_an_object": 1}),
        _jsonl("non_utf8.jsonl", "bytes that are not UTF-8", [b'{"event_id": "\xff\xfe", "x": 1}'],
               {"invalid_utf8": 1}),
        _jsonl("nul_byte.jsonl", "a NUL byte inside a line", [b'{"event_id": "n\x00ul"}'], {"malformed_json": 1}),
        _jsonl("several_reasons.jsonl", "one row, three problems",
               [line(event("sr", model="nope", speed_tier="warp", output_tokens=-1))],
               {"unknown_model,unknown_speed_tier,negative_tokens": 1}),
        _jsonl("resend.jsonl", "an identical resend of an event", [line(event("resend-good"))], {}, duplicates=1),
        _jsonl("conflicting_ids.jsonl", "the same event_id with another payload",
               [line(event("conflicting_ids-good", input_tokens=99_999))], {"conflicting_duplicate": 1}),
        _jsonl("hostile_but_valid.jsonl", "quotes, semicolons and unicode are data, not SQL",
               [line(event("h1", account_id="acct';drop/**/table/**/usage_daily;--")),
                line(event("h2", account_id="акаунт-😀", user_id='"quoted"'))], {}, clean=3),
        Case("utf8_bom.jsonl", "a UTF-8 byte order mark before the first line (accepted)",
             "\ufeff".encode() + line(event("bom-1")) + b"\n" + line(event("bom-2")) + b"\n", {}, clean=2),
        Case("empty.jsonl", "an empty file", b""),
        Case("blank_lines.jsonl", "only blank lines", b"\n\n   \n\r\n"),
        Case("deep_batch.json", "a CloudEvents batch nested 100,000 levels deep (refused before parsing)",
             b"[" * 100_000 + b"]" * 100_000, {"malformed_json": 1}),
        Case("deep_event_batch.json", "a CloudEvent in a batch whose data nests 3,000 objects deep",
             b'[{"specversion":"1.0","id":"deep","data":' + b'{"a":' * 3000 + b"1" + b"}" * 3001 + b"]",
             {"malformed_json": 1}),
        Case("truncated.jsonl.gz", "a gzip file cut short", gz_good[: len(gz_good) // 2], {"unreadable_file": 1}),
        Case("garbage.jsonl.gz", "binary garbage named .gz", bytes(range(256)) * 8, {"unreadable_file": 1}),
        Case("corrupt_deflate.jsonl.gz", "a gzip header before damaged compressed data",
             gz_good[:20] + bytes(b ^ 0xFF for b in gz_good[20:60]) + gz_good[60:], {"unreadable_file": 1}),
        Case("corrupt.parquet", "a Parquet file with a broken footer", _parquet(good_table)[:-40],
             {"unreadable_file": 1}),
        Case("wrong_schema.parquet", "a Parquet file whose tokens are text",
             _parquet(good_table.set_column(6, "input_tokens", pa.array(["1", "2"]))), {"wrong_schema": 1}),
        Case("good.parquet", "a valid Parquet file beside the bad ones", _parquet(good_table), {}, clean=2),
        Case("notes.csv", "a file type ingest does not read", b"event_id,account_id\n1,2\n",
             {"unsupported_format": 1}),
        Case("cloudevents_missing_id.jsonl", "a CloudEvent without id",
             line(ce("ce-good", _data("x"))) + b"\n" + line(ce(None, _data("y"))) + b"\n",
             {"missing_event_id": 1}, clean=1),
        Case("cloudevents_bad_spec.jsonl", "a CloudEvent of specversion 0.3",
             line(ce("ce-spec-good", _data("x"))) + b"\n" + line(ce("ce-spec-bad", _data("y"), spec="0.3")) + b"\n",
             {"unsupported_specversion": 1}, clean=1),
        Case("cloudevents_batch.json", "a CloudEvents batch with an event missing its data",
             json.dumps([ce("ceb-good", _data("x")), {k: v for k, v in ce("ceb-bad", _data("y")).items()
                                                      if k != "data"}]).encode(),
             {"missing_account_id,missing_model,missing_speed_tier,missing_input_tokens,"
              "missing_cached_input_tokens,missing_output_tokens,missing_status": 1}, clean=1),
        Case("specversion_as_value.jsonl", "the word specversion as a value and as an extra key of plain events",
             line(event("sv-1", error_code="specversion")) + b"\n" + line({**event("sv-2"), "specversion": "1.0"})
             + b"\n" + line(event("sv-3")) + b"\n", {}, clean=3),
        Case("mixed_formats.jsonl", "plain events and CloudEvents in one file, each read by its keys",
             line(event("mix-1")) + b"\n" + line(ce("mix-2", _data("x"))) + b"\n" + line(event("mix-3")) + b"\n",
             {}, clean=3),
        _jsonl("nul_in_account.jsonl", "a NUL character (escaped) in account_id",
               [line(event("nul-a", account_id="acct\u0000x"))], {"control_character": 1}),
        _jsonl("escape_in_user.jsonl", "a terminal escape sequence in user_id",
               [line(event("esc-u", user_id="\u001b[31mred"))], {"control_character": 1}),
        _jsonl("c1_control_in_error.jsonl", "a C1 control character (U+0085) in error_code",
               [line(event("c1-e", error_code="bad\u0085code"))], {"control_character": 1}),
        _jsonl("empty_account.jsonl", "an empty account_id", [line(event("ea", account_id=""))],
               {"empty_account_id": 1}),
        _jsonl("blank_account.jsonl", "an account_id of ideographic spaces only",
               [line(event("ba", account_id="\u3000\u3000"))], {"empty_account_id": 1}),
        _jsonl("lookalike_accounts.jsonl", "look-alikes of acct-bad-corpus: spaces around it, a zero-width "
               "space, a fullwidth digit, upper case, a decomposed accent (NFD) against the composed one",
               [line(event(f"la-{i}", account_id=a)) for i, a in enumerate(LOOKALIKES)],
               {"non_canonical_account_id": len(LOOKALIKES)}),
        _jsonl("picosecond_times.jsonl", "twelve fraction digits in event_time (truncated to microseconds)",
               [line(event("ps-1", event_time=f"{DAY}T10:00:00.123456789012Z"))], {}, clean=2),
        _jsonl("blank_event_id.jsonl", "an event_id of spaces only", [line(event("   "))], {"empty_event_id": 1}),
        _jsonl("huge_duration.jsonl", "a duration of 2^62 ms (its day's sum would overflow)",
               [line(event("hd", duration_ms=4611686018427387904))], {"duration_out_of_range": 1}),
        _jsonl("no_price_tier.jsonl", "a tier with no price in force yet on the event's day",
               [line(event("np1", speed_tier="ultrafast"))], {"no_price": 1}),
        _jsonl("no_price_model.jsonl", "a model whose first price starts after the event's day",
               [line(event("np2", model="gpt-5.5-mini"))], {"no_price": 1}),
        Case("uint64_tokens.parquet", "a Parquet file with unsigned 64-bit tokens, one of them 2^64-1",
             _parquet_uint64(2**64 - 1), {"tokens_out_of_range": 1}, clean=1),
        Case("twice_named.parquet", "a Parquet file with two columns named input_tokens", _parquet_twice(),
             {"wrong_schema": 1}),
        Case("int_dictionary.parquet", "a Parquet file whose model column is a dictionary of integers",
             _parquet_int_dictionary(), {"wrong_schema": 1}),
        Case("uint64_duration.parquet", "a Parquet file with an unsigned 64-bit duration of 2^64-1",
             _parquet_column("duration_ms", pa.array([4000, 2**64 - 1], pa.uint64()), "u64d"),
             {"duration_out_of_range": 1}, clean=1),
        Case("naive_times.parquet", "a Parquet file whose event_time has no zone",
             _parquet_column("event_time", pa.array([None, None], pa.timestamp("us")).fill_null(0), "naive"),
             {"naive_event_time": 2}),
        Case("nanosecond_times.parquet", "a Parquet file with nanosecond timestamps (truncated to microseconds)",
             _parquet_column("event_time", pa.array([_ns(DAY, 1), _ns(DAY, 2)], pa.timestamp("ns", tz="UTC")), "nanos"),
             {}, clean=2),
        Case("year_9999.parquet", "a Parquet timestamp in the year 9999",
             _parquet_column("event_time", pa.array([_ns(DAY, 3) // 1000, 253402300799000000],
                                                    pa.timestamp("us", tz="UTC")), "y9999"),
             {"future_event": 1}, clean=1),
        Case("beyond_year_9999.parquet", "a Parquet timestamp past Python's last year (26059)",
             _parquet_column("event_time", pa.array([_ns(DAY, 4) // 1000, 253402300799000000 * 3],
                                                    pa.timestamp("us", tz="UTC")), "y26059"),
             {"future_event": 1}, clean=1),
        Case("int_times.parquet", "a Parquet file whose event_time holds integers",
             _parquet_column("event_time", pa.array([1, 2], pa.int64()), "intt"), {"wrong_schema": 1}),
        _jsonl("newline_in_event_id.jsonl", "an escaped newline inside event_id",
               [line(event("line\nbreak"))], {"control_character": 1}),
        Case("cloudevent_data_not_object.jsonl", "a CloudEvent whose data is a string, not an object",
             line(ce("ce-str-good", _data("x"))) + b"\n" + line({**ce("ce-str-bad", {}), "data": "tokens"}) + b"\n",
             {"missing_event_id,missing_account_id,missing_model,missing_speed_tier,missing_input_tokens,"
              "missing_cached_input_tokens,missing_output_tokens,missing_status,missing_event_time": 1}, clean=1),
        Case("ten_mb_line.jsonl", "a single 10 MB line",
             line(event("big-good")) + b"\n" + line(event("big", user_id="u" * 10_000_000)) + b"\n",
             {"value_too_long": 1}, clean=1, big=True),
    ]


def _parquet_uint64(big_value: int) -> bytes:
    table = pa.Table.from_pylist([event("u64-good"), event("u64-bad")])
    col = pa.array([300, big_value], pa.uint64())
    return _parquet(table.set_column(table.schema.get_field_index("output_tokens"), "output_tokens", col))


def _parquet_column(name: str, values: pa.Array, tag: str) -> bytes:
    table = pa.Table.from_pylist([event(f"{tag}-1"), event(f"{tag}-2")])
    return _parquet(table.set_column(table.schema.get_field_index(name), name, values))


def _ns(day: str, nanos: int) -> int:
    """Nanoseconds since the epoch of 10:00 UTC on ``day``, plus ``nanos`` (not a whole microsecond)."""
    import datetime as dt

    start = dt.datetime.combine(dt.date.fromisoformat(day), dt.time(10), tzinfo=dt.UTC)
    return int(start.timestamp()) * 10**9 + 123_456_000 + nanos


def _parquet_twice() -> bytes:
    table = pa.Table.from_pylist([event("twice-1")])
    return _parquet(table.append_column("input_tokens", pa.array([5], pa.int64())))


def _parquet_int_dictionary() -> bytes:
    table = pa.Table.from_pylist([event("intdict-1")])
    col = pa.array([7], pa.int64()).dictionary_encode()
    return _parquet(table.set_column(table.schema.get_field_index("model"), "model", col))


def _specials() -> list[Case]:
    """Entries that are not regular files, and names no file system check makes safe: generated into
    temporary folders only (git keeps no FIFO, and a name that is not UTF-8 is no name in a checkout)."""
    body = line(event("named-1")) + b"\n"
    return [
        Case("passwd-link.jsonl", "a symbolic link to /etc/passwd (never opened)", b"",
             {"not_a_regular_file": 1}, big=True, special="symlink"),
        Case("zero-link.jsonl", "a symbolic link to /dev/zero (never read)", b"",
             {"not_a_regular_file": 1}, big=True, special="symlink:/dev/zero"),
        Case("pipe.jsonl", "a FIFO that no producer writes to (never opened)", b"",
             {"not_a_regular_file": 1}, big=True, special="fifo"),
        Case("subfolder.jsonl", "a folder among the landing files", b"",
             {"not_a_regular_file": 1}, big=True, special="folder"),
        Case("bad-\udcff-name.jsonl", "a file name with bytes that are not UTF-8", body, {}, clean=1,
             big=True, recorded="bad-\\xff-name.jsonl"),
        Case("tab\tname.jsonl", "a file name with a control character", line(event("named-2")) + b"\n", {},
             clean=1, big=True, recorded="tab\\tname.jsonl"),
        Case("overlong_line.jsonl", "a 65 MB line, longer than any line is read",
             line(event("long-good")) + b"\n" + b"x" * (65 << 20) + b"\n" + line(event("long-after")) + b"\n",
             {"line_too_long": 1}, clean=2, big=True),
    ]


def write(folder: Path, big: bool = False) -> list[Case]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for case in cases() + (_specials() if big else []):
        if case.big and not big:
            continue
        target = folder / case.name
        kind = (case.special or "").split(":")[0]
        if kind == "symlink":
            os.symlink((case.special or "").partition(":")[2] or "/etc/passwd", target)
        elif kind == "fifo":
            os.mkfifo(target)
        elif kind == "folder":
            target.mkdir()
            (target / "inside.jsonl").write_bytes(line(event("inside-folder")) + b"\n")
        else:
            target.write_bytes(case.content)
        written.append(case)
    return written


if __name__ == "__main__":
    for old in HERE.iterdir():  # the task outcomes' examples are outcome_corpus's
        if old.suffix in (".jsonl", ".json", ".gz", ".parquet", ".csv") and not old.name.startswith("outcomes"):
            old.unlink()
    print(f"wrote {len(write(HERE))} example files to {HERE}")
