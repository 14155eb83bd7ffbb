"""libpq through ctypes: the read commands' PostgreSQL connection, without importing a driver.

Why not psycopg here: importing it takes ~110 ms (every adapter, asyncio, ssl, ``importlib.metadata``), more
than a third of the 0.3 s a read command has in all; loading libpq itself takes ~5 ms. The read path needs
only a handful of libpq calls (connect, run one statement through the extended protocol, read text results,
cancel), so it makes them directly. Writers keep psycopg, through SQLAlchemy.

The library is the system's (``libpq.so.5``, what Debian's ``libpq5`` and every PostgreSQL install
provide), else the copy bundled in the ``psycopg-binary`` wheel (``pip install 'tilelens[postgres]'``), else
whatever ``ctypes.util.find_library('pq')`` finds.

Values arrive as the server's text; :func:`converter` turns each column's text into the value psycopg would
have given, already in the form :func:`tilelens.store.sql.pgreader.plain_value` makes of it (SQLite's forms).
Invariant: one :class:`Connection` is used by one thread; only :meth:`Connection.cancel` may be called from
another (libpq's ``PQcancel`` is made for that).
"""

from __future__ import annotations

import ctypes
import datetime as dt
import decimal
import glob
import importlib.util
import json
import os
import re
import select
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

# PQresultStatus values (libpq-fe.h)
PGRES_COMMAND_OK = 1
PGRES_TUPLES_OK = 2
CONNECTION_OK = 0
PG_DIAG_MESSAGE_PRIMARY = ord("M")


class LibpqError(Exception):
    """A failed libpq call: ``connection`` for a connection that failed or broke, else the server's error."""

    def __init__(self, message: str, connection: bool = False) -> None:
        super().__init__(message)
        self.connection = connection


_lib: Any = None


def _candidates() -> Iterator[str]:
    if sys.platform == "darwin":
        yield "libpq.5.dylib"
    elif sys.platform == "win32":
        yield "libpq.dll"
    else:
        yield "libpq.so.5"
    spec = importlib.util.find_spec("psycopg_binary")  # finds the folder; imports nothing
    if spec is not None and spec.submodule_search_locations:
        here = list(spec.submodule_search_locations)[0]
        for pattern in (
            "../psycopg_binary.libs/libpq*",
            ".dylibs/libpq*",
            "../psycopg_binary.libs/libpq*.dll",
        ):
            yield from sorted(glob.glob(os.path.join(here, pattern)))
    import ctypes.util

    found = ctypes.util.find_library("pq")
    if found:
        yield found


def load() -> Any:
    """libpq, loaded once, its functions' signatures declared; raises OSError when there is none."""
    global _lib
    if _lib is not None:
        return _lib
    lib = None
    for name in _candidates():
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        raise OSError("libpq not found")
    p, i, s, u = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "PQconnectdbParams": (p, [ctypes.POINTER(s), ctypes.POINTER(s), i]),
        "PQstatus": (i, [p]),
        "PQerrorMessage": (s, [p]),
        "PQfinish": (None, [p]),
        "PQsendQuery": (i, [p, s]),
        "PQsendQueryParams": (i, [p, s, i, ctypes.POINTER(u), ctypes.POINTER(s), p, p, i]),
        "PQsendDescribePortal": (i, [p, s]),
        "PQgetResult": (p, [p]),
        "PQconsumeInput": (i, [p]),
        "PQisBusy": (i, [p]),
        "PQsocket": (i, [p]),
        "PQresultStatus": (i, [p]),
        "PQresultErrorField": (s, [p, i]),
        "PQresultErrorMessage": (s, [p]),
        "PQclear": (None, [p]),
        "PQntuples": (i, [p]),
        "PQnfields": (i, [p]),
        "PQfname": (s, [p, i]),
        "PQftype": (u, [p, i]),
        "PQgetvalue": (s, [p, i, i]),
        "PQgetisnull": (i, [p, i, i]),
        "PQgetCancel": (p, [p]),
        "PQfreeCancel": (None, [p]),
        "PQcancel": (i, [p, s, i]),
        "PQsetNoticeProcessor": (p, [p, p, p]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    _lib = lib
    return lib


_NOTICES = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)
_ignore_notice = _NOTICES(lambda _arg, _message: None)  # libpq would print NOTICEs on stderr


def _text(raw: bytes | None) -> str:
    return (raw or b"").decode("utf-8", "replace")


class Result:
    """One libpq result: its columns' names and type oids, its rows as text (None for NULL)."""

    def __init__(self, lib: Any, res: int) -> None:
        self._lib = lib
        self.res = res

    @property
    def columns(self) -> list[tuple[str, int]]:
        lib = self._lib
        return [
            (_text(lib.PQfname(self.res, c)), int(lib.PQftype(self.res, c)))
            for c in range(lib.PQnfields(self.res))
        ]

    def rows(self, convert: Sequence[Callable[[str], Any]] | None = None) -> list[tuple[Any, ...]]:
        lib, res = self._lib, self.res
        getvalue, isnull = lib.PQgetvalue, lib.PQgetisnull
        ncols = lib.PQnfields(res)
        out = []
        for r in range(lib.PQntuples(res)):
            row: list[Any] = []
            for c in range(ncols):
                raw = getvalue(res, r, c)
                if not raw and isnull(res, r, c):  # libpq gives "" for NULL: look only then
                    row.append(None)
                    continue
                text = raw.decode("utf-8", "replace")
                row.append(convert[c](text) if convert is not None else text)
            out.append(tuple(row))
        return out

    def clear(self) -> None:
        if self.res:
            self._lib.PQclear(self.res)
            self.res = 0


class Connection:
    """One libpq connection (see the module docstring); statements raise :class:`LibpqError`."""

    def __init__(self, params: Mapping[str, str]) -> None:
        self._lib = lib = load()
        keys = [k.encode() for k in params] + [None]
        values = [str(v).encode() for v in params.values()] + [None]
        key_array = (ctypes.c_char_p * len(keys))(*keys)
        value_array = (ctypes.c_char_p * len(values))(*values)
        self._conn = lib.PQconnectdbParams(key_array, value_array, 0)
        if not self._conn:
            raise LibpqError("out of memory", connection=True)
        if lib.PQstatus(self._conn) != CONNECTION_OK:
            message = _text(lib.PQerrorMessage(self._conn)).strip()
            lib.PQfinish(self._conn)
            self._conn = None
            raise LibpqError(message, connection=True)
        lib.PQsetNoticeProcessor(self._conn, ctypes.cast(_ignore_notice, ctypes.c_void_p), None)
        self._cancel = lib.PQgetCancel(self._conn)

    @property
    def closed(self) -> bool:
        return self._conn is None

    def _broken(self) -> LibpqError:
        return LibpqError(_text(self._lib.PQerrorMessage(self._conn)).strip(), connection=True)

    def _wait(self, sent: int, sql: str) -> Result:
        """The results of what was just sent: the first error, else the last result.

        Waiting happens here in Python (``select`` on the socket), not inside a blocking libpq call, so a
        signal handler (Ctrl-C in ``tilelens sql``) runs while the server works and can cancel it.
        """
        lib, conn = self._lib, self._conn
        if not sent:
            raise self._broken()
        sock = lib.PQsocket(conn)
        results: list[int] = []
        while True:
            while lib.PQisBusy(conn):
                select.select([sock], [], [])
                if not lib.PQconsumeInput(conn):
                    for res in results:
                        lib.PQclear(res)
                    raise self._broken()
            res = lib.PQgetResult(conn)
            if not res:
                break
            results.append(res)
        if not results:
            raise self._broken()
        failed = [r for r in results if lib.PQresultStatus(r) not in (PGRES_COMMAND_OK, PGRES_TUPLES_OK)]
        keep = failed[0] if failed else results[-1]
        for res in results:
            if res != keep:
                lib.PQclear(res)
        if not failed:
            return Result(lib, keep)
        primary = lib.PQresultErrorField(keep, PG_DIAG_MESSAGE_PRIMARY)
        message = _text(primary) if primary else _text(lib.PQresultErrorMessage(keep))
        message = message.strip() or _text(lib.PQerrorMessage(conn)).strip()
        lib.PQclear(keep)
        broken = lib.PQstatus(conn) != CONNECTION_OK
        raise LibpqError(message or f"statement failed: {sql[:60]}", connection=broken)

    def run(self, sql: str) -> Result:
        """Our own fixed text, through the simple protocol (it may hold several statements)."""
        return self._wait(self._lib.PQsendQuery(self._conn, sql.encode()), sql)

    def run_params(self, sql: str, params: Sequence[Any] = ()) -> Result:
        """One statement through the extended protocol: the server refuses a second one in the text."""
        n = len(params)
        types = (ctypes.c_uint * max(n, 1))(*[param_type(v) for v in params])
        values = (ctypes.c_char_p * max(n, 1))(*[param_text(v) for v in params])
        sent = self._lib.PQsendQueryParams(self._conn, sql.encode(), n, types, values, None, None, 0)
        return self._wait(sent, sql)

    def describe_portal(self, name: str) -> Result:
        return self._wait(self._lib.PQsendDescribePortal(self._conn, name.encode()), name)

    def scalar(self, sql: str) -> str | None:
        result = self.run(sql)
        try:
            rows = result.rows()
            return rows[0][0] if rows else None
        finally:
            result.clear()

    def cancel(self) -> None:
        """Ask the server to stop the running statement (safe from another thread)."""
        if self._cancel:
            buffer = ctypes.create_string_buffer(256)
            self._lib.PQcancel(self._cancel, buffer, 256)

    def close(self) -> None:
        if self._conn is not None:
            if self._cancel:
                self._lib.PQfreeCancel(self._cancel)
                self._cancel = None
            self._lib.PQfinish(self._conn)
            self._conn = None


# -- parameters -----------------------------------------------------------------------------------------------


def param_type(value: Any) -> int:
    """The type oid a parameter is sent as (0: let the server infer it, as psycopg does for text)."""
    if isinstance(value, bool):
        return 16
    if isinstance(value, int):
        return 20 if -(2**63) <= value < 2**63 else 1700
    if isinstance(value, float):
        return 701
    if isinstance(value, (bytes, bytearray, memoryview)):
        return 17
    return 0


def param_text(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"\\x" + bytes(value).hex().encode()
    if isinstance(value, float):
        return repr(value).encode()
    return str(value).encode()


# -- values: the server's text as SQLite's forms ----------------------------------------------------------------

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
_TIMESTAMP_RE = re.compile(
    r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?"
)
_TIME_RE = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?")
_INTERVAL_PART_RE = re.compile(r"([-+]?\d+) (year|mon|day)s?")
_INTERVAL_TIME_RE = re.compile(r"([-+])?(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?")
_INTEGER_RE = re.compile(r"-?[0-9]+")
_REAL_RE = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _offset(sign: str | None, hh: str | None, mm: str | None, ss: str | None) -> dt.timezone | None:
    if sign is None:
        return None
    delta = dt.timedelta(hours=int(hh or 0), minutes=int(mm or 0), seconds=int(ss or 0))
    return dt.timezone(-delta if sign == "-" else delta)


def timestamp(text: str) -> str:
    """``timestamp``/``timestamptz`` text as SQLite's UTC text (``YYYY-MM-DD HH:MM:SS.ffffff``)."""
    m = _TIMESTAMP_RE.fullmatch(text)
    if m is None:  # infinity, BC dates: psycopg could not make a datetime of these either
        return text
    y, mo, d, h, mi, s, frac, sign, oh, om, os_ = m.groups()
    value = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), int((frac or "0").ljust(6, "0")))
    zone = _offset(sign, oh, om, os_)
    if zone is not None:
        value = value.replace(tzinfo=zone).astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value.strftime(TIMESTAMP_FORMAT)


def time_of_day(text: str) -> str:
    m = _TIME_RE.fullmatch(text)
    if m is None:
        return text
    h, mi, s, frac, sign, oh, om, os_ = m.groups()
    return dt.time(
        int(h), int(mi), int(s), int((frac or "0").ljust(6, "0")), _offset(sign, oh, om, os_)
    ).isoformat()


def interval(text: str) -> str:
    """``interval`` text (IntervalStyle postgres) as ``str(timedelta)``: a month is 30 days, a year 365."""
    days = 0
    for number, unit in _INTERVAL_PART_RE.findall(text):
        days += int(number) * {"year": 365, "mon": 30, "day": 1}[unit]
    seconds = 0.0
    m = _INTERVAL_TIME_RE.search(text)
    micro = 0
    if m is not None:
        sign, h, mi, s, frac = m.groups()
        total = int(h) * 3600 + int(mi) * 60 + int(s)
        micro = int((frac or "0").ljust(6, "0"))
        seconds = float(-total if sign == "-" else total)
        micro = -micro if sign == "-" else micro
    return str(dt.timedelta(days=days, seconds=seconds, microseconds=micro))


def numeric(text: str) -> Any:
    value = decimal.Decimal(text)
    if not value.is_finite():
        return float(value)
    return int(value) if value == value.to_integral_value() else float(value)


def json_number(text: str) -> Any:
    """A JSON column's text, or the number it is, as SQLite's NUMERIC affinity keeps a bare JSON number."""
    if _INTEGER_RE.fullmatch(text):
        value = int(text)
        return value if -(2**63) <= value < 2**63 else float(value)
    if _REAL_RE.fullmatch(text):
        return float(text)
    return text


def boolean(text: str) -> int:
    return 1 if text == "t" else 0


def bytea(text: str) -> bytes:
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    return text.encode("latin-1", "replace")  # the old escape format: not what a server sends by default


def identity(text: str) -> str:
    return text


_SCALARS: dict[int, Callable[[str], Any]] = {
    16: boolean,
    17: bytea,
    20: int, 21: int, 23: int, 26: int,
    700: float, 701: float,
    1700: numeric,
    114: json_number, 3802: json_number,
    1114: timestamp, 1184: timestamp,
    1082: identity,  # DateStyle ISO: already date.isoformat()
    1083: time_of_day, 1266: time_of_day,
    1186: interval,
}  # fmt: skip
# array oid -> element oid, for the arrays a query over a history plausibly makes (array_agg of its columns)
_ARRAYS = {
    1000: 16, 1005: 21, 1007: 23, 1016: 20, 1021: 700, 1022: 701, 1231: 1700, 1009: 25, 1015: 1043,
    1014: 1042, 1003: 19, 199: 114, 3807: 3802, 1115: 1114, 1185: 1184, 1182: 1082, 2951: 2950,
}  # fmt: skip
_ARRAY_ITEM_RE = re.compile(r'"((?:[^"\\]|\\.)*)"|([^,{}]+)')


def _array_element(oid: int) -> Callable[[str], Any]:
    if oid == 16:
        return lambda t: t == "t"  # psycopg gives bools inside a list; json.dumps writes true/false
    if oid in (114, 3802):
        return identity  # JSON elements stay their text, as JSON columns do
    return _SCALARS.get(oid, identity)


def array(element: Callable[[str], Any]) -> Callable[[str], Any]:
    """An array's text (``{1,2,NULL}``, nested ``{{..},{..}}``) as the JSON of the list psycopg would give."""

    def parse(text: str) -> Any:
        stack: list[list[Any]] = [[]]
        i = text.find("{")  # past a ``[1:2]=`` bounds prefix
        if i < 0:
            return text
        pos = i
        while pos < len(text):
            ch = text[pos]
            if ch == "{":
                stack.append([])
                pos += 1
            elif ch == "}":
                done = stack.pop()
                stack[-1].append(done)
                pos += 1
            elif ch == ",":
                pos += 1
            else:
                m = _ARRAY_ITEM_RE.match(text, pos)
                if m is None:
                    return text
                if m.group(1) is not None:
                    stack[-1].append(element(re.sub(r"\\(.)", r"\1", m.group(1))))
                else:
                    raw = m.group(2).strip()
                    stack[-1].append(None if raw == "NULL" else element(raw))
                pos = m.end()
        value = stack[0][0] if stack[0] else []
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return text

    return parse


def converter(oid: int) -> Callable[[str], Any]:
    """How a column of type ``oid`` turns from text into the value ``tilelens sql`` shows."""
    scalar = _SCALARS.get(oid)
    if scalar is not None:
        return scalar
    element = _ARRAYS.get(oid)
    if element is not None:
        return array(_array_element(element))
    return identity  # text, varchar, uuid, name, and every type without a Python form: the server's text
