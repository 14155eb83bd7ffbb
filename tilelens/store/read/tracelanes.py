"""``trace_events`` inside DuckDB: the trace blobs' Parquet read by DuckDB itself, the lanes expanded in SQL.

A trace row (:data:`tilelens.store.files.traces.TRACE_SCHEMA`) stands for ``lanes`` lanes: an affine row's
offsets are ``base`` plus the C-order unravelled lane index times ``strides``, an irregular row lists them in
``offsets``, and ``mask`` / ``oob_mask`` are packed bits in ``numpy.packbits`` order, which is the order of
DuckDB's ``BIT`` (bit 0 the first byte's highest). The expansion here is the SQL twin of
:meth:`tilelens.store.files.lanes.LaneDecoder.decode_rows`; a test holds the two to the same rows.

Three relations, built by :func:`load` and :func:`create_views`:

- ``tl_trace_rows``: the rows of each distinct trace the query may need, read once however many launches
  share the trace, keyed by ``blob_id``; per-axis shape and strides padded to scalar columns (size 1,
  stride 0: C-order unravelling is unchanged);
- ``tl_lanes`` (a view): one row per lane of each distinct trace;
- ``trace_events`` (a view): ``tl_lanes`` named once per set of argument names (``tl_arg_names``), then
  joined to the launches that recorded each trace with that set (``tl_launches``).

Views, not tables: DuckDB computes only the columns and launches a statement reads, and a trace's lanes once
per statement, however many launches share it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load(con: Any, files: list[Path]) -> int:
    """Read the trace files (each a verified blob; ``blob_id`` is its index in ``files``) into
    ``tl_trace_rows``; the widest block rank among them, which :func:`create_views` needs."""
    import pyarrow as pa

    from tilelens.store.files.arrowbuild import numbers, strings

    names = [str(f) for f in files]
    if not names:  # no trace: an empty table of the same columns
        con.execute(
            """CREATE TABLE tl_trace_rows AS
            SELECT 0 AS blob_id, 0::INTEGER AS pid_x, 0::INTEGER AS pid_y, 0::INTEGER AS pid_z,
                   0::INTEGER AS event, ''::VARCHAR AS op, 0::SMALLINT AS arg, 0::INTEGER AS line,
                   0::INTEGER AS lanes, 0::BIGINT AS base, NULL::BIGINT[] AS offsets, 1::BIGINT AS sh1,
                   0::BIGINT AS st1, NULL::BIT AS mask_bits, NULL::BIT AS oob_bits
            WHERE false"""
        )
        return 1
    files_table = pa.Table.from_arrays(  # from buffers: pyarrow.array on a list imports pandas
        [strings(names), numbers(range(len(names)), pa.int64())], names=["filename", "blob_id"]
    )
    con.register("tl_files", files_table)
    # union_by_name: traces written before a column existed (stray lanes) lack it; none read here is new.
    con.execute(
        """CREATE TEMP TABLE tl_raw_rows AS
        SELECT f.blob_id, p.pid_x, p.pid_y, p.pid_z, p.event, p.op::VARCHAR AS op, p.arg, p.line, p.lanes,
               p.base, p.shape, p.strides, p.offsets,
               CASE WHEN octet_length(p.mask) > 0 THEN p.mask::BIT END AS mask_bits,
               CASE WHEN octet_length(p.oob_mask) > 0 THEN p.oob_mask::BIT END AS oob_bits
        FROM read_parquet(?, filename = true, union_by_name = true) p JOIN tl_files f ON f.filename = p.filename""",
        [names],
    )
    con.unregister("tl_files")
    (width,) = con.execute("SELECT coalesce(max(len(shape)), 1) FROM tl_raw_rows").fetchall()[0]
    padded = ", ".join(
        f"coalesce(shape[{a}], 1)::BIGINT AS sh{a}, coalesce(strides[{a}], 0)::BIGINT AS st{a}"
        for a in range(1, int(width) + 1)
    )
    con.execute(
        f"""CREATE TABLE tl_trace_rows AS
        SELECT blob_id, pid_x, pid_y, pid_z, event, op, arg, line, lanes, base, offsets, {padded}, mask_bits,
               oob_bits
        FROM tl_raw_rows"""
    )
    con.execute("DROP TABLE tl_raw_rows")
    return int(width)


def _offset(width: int) -> str:
    """The affine offset of lane ``lane``: C-order unravelling over the padded axes (the first axis needs no
    modulo, the last no division)."""
    terms = []
    for a in range(1, width + 1):
        suffix = " * ".join(f"sh{b}" for b in range(a + 1, width + 1))
        index = "lane" if not suffix else f"(lane // ({suffix}))"
        if a > 1:
            index = f"({index} % sh{a})"
        terms.append(f"{index} * st{a}")
    return "base + " + " + ".join(terms)


def create_views(con: Any, width: int) -> None:
    """``tl_lanes`` and ``trace_events`` over ``tl_trace_rows``, ``tl_launches`` (launch_id, kernel,
    kernel_id, run_id, blob_id, names_id) and ``tl_arg_names`` (names_id, position, name)."""
    con.execute(
        f"""CREATE VIEW tl_lanes AS
        SELECT blob_id, pid_x, pid_y, pid_z, event, op, arg, line, lane::INTEGER AS lane,
               CASE WHEN offsets IS NULL THEN {_offset(width)} ELSE offsets[lane + 1] END AS "offset",
               coalesce(get_bit(mask_bits, lane::INTEGER) = 1, true) AS active,
               coalesce(get_bit(oob_bits, lane::INTEGER) = 1, false) AS oob
        FROM (SELECT *, unnest(range(lanes)) AS lane FROM tl_trace_rows)"""
    )
    # Names join each (trace, name set) pair's lanes once; only then do the lanes fan out to the launches.
    con.execute(
        """CREATE VIEW tl_named_lanes AS
        SELECT p.names_id, e.*, n.name AS arg_name
        FROM (SELECT DISTINCT blob_id, names_id FROM tl_launches) p
        JOIN tl_lanes e ON e.blob_id = p.blob_id
        LEFT JOIN tl_arg_names n ON n.names_id = p.names_id AND n.position = e.arg"""
    )
    con.execute(
        """CREATE VIEW trace_events AS
        SELECT m.launch_id, e.pid_x, e.pid_y, e.pid_z, e.event, e.op, e.arg, e.arg_name, e.line, e.lane,
               e."offset", e.active, e.oob, m.kernel, m.run_id
        FROM tl_launches m JOIN tl_named_lanes e ON e.blob_id = m.blob_id AND e.names_id = m.names_id"""
    )
