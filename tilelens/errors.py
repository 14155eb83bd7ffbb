"""Every error TileLens raises on purpose: one family, one class per concept.

Each carries a message meant to be shown as-is on one line, naming the thing that is wrong and in words that
hold for the Python API as much as for the command line (the CLI adds its own flag hints). ``tilelens.cli``
catches :class:`TileLensError` only: it prints ``tilelens: error: MESSAGE`` and exits with the error's
``exit_code`` (2, a usage or input error, unless a class says otherwise). Any other exception is a bug and
keeps its traceback.

Driver errors that are expected (a file that cannot be opened, a locked or foreign database) are turned into
:class:`HistoryError`\\ s where the store meets the database, so nothing above the store sees SQLAlchemy's or
sqlite3's exception types. Classes that also derive from a builtin (``ValueError``, ``RuntimeError``,
``NotImplementedError``) keep working for callers that catch the builtin.
"""

from __future__ import annotations

from pathlib import Path


class TileLensError(Exception):
    """An expected failure: the message is the one line a user sees; ``exit_code`` what ``tilelens`` exits with."""

    exit_code: int = 2


# -- how TileLens was called --------------------------------------------------------------------------------


class UsageError(TileLensError, ValueError):
    """A value given to TileLens is not one it accepts: an option, an argument, a file to write."""


class LocationError(UsageError):
    """The given location cannot name a history (bad URL syntax)."""


class SettingsError(UsageError):
    """``[tool.tilelens]`` in pyproject.toml or a ``TILELENS_*`` variable holds something TileLens cannot use."""


class ProgramNotFoundError(UsageError):
    """The script does not exist or the module cannot be found: nothing was run."""


class StateError(TileLensError, RuntimeError):
    """Asked at a moment it cannot be done: a recording inside a recording, a replay inside a recording."""


class UnsupportedError(TileLensError, NotImplementedError):
    """Outside what TileLens supports: a Triton release, a database server, a construct it cannot run."""


class OutOfBoundsError(TileLensError, RuntimeError):
    """A launch touched memory outside its arguments under ``on_oob="raise"``; the launch was recorded first.

    Raised into the user's program at the launch (see :mod:`tilelens.core.engine.bounds`), so the program may catch
    it; uncaught, it ends the program as any exception does. The message names the kernel, the source line,
    the program, the argument and how far out of bounds the first offending event reached. ``exit_code`` is
    3, the status of ``tilelens record --fail-on-oob`` when any lane was out of bounds.
    """

    exit_code = 3


# -- histories ----------------------------------------------------------------------------------------------


class HistoryError(TileLensError):
    """A history cannot be opened, read or written as asked."""


class NoHistoryError(HistoryError):
    """Nothing at the location: reading never creates a history."""


class NotAHistoryError(HistoryError):
    """The location exists but is not a TileLens history (not a database, or another program's database)."""


class SchemaTooNewError(HistoryError):
    """The history was written by a newer TileLens; this code must not touch it."""

    def __init__(self, location: str, revisions: list[str], head: str) -> None:
        self.location = location
        self.revisions = revisions
        self.head = head
        super().__init__(
            f"history {location} has schema revision {', '.join(revisions)}, newer than this TileLens "
            f"understands (its newest is {head}); upgrade TileLens to use it"
        )


class SchemaBehindError(HistoryError):
    """The history's schema is older than this code's, and the command only uses histories as they are."""

    def __init__(self, location: str, revisions: list[str], head: str) -> None:
        self.location = location
        self.revisions = revisions
        self.head = head
        super().__init__(
            f"history {location} has schema revision {', '.join(revisions)}, older than this TileLens's "
            f"{head}; it is left as it is"
        )


class SchemaStampError(HistoryError):
    """The history's record of its own schema revision is inconsistent (rows that cannot all be true)."""


class LaunchNotFoundError(HistoryError):
    """No launch with that id in the history."""


class KernelNotFoundError(HistoryError):
    """No kernel with that id in the history."""


class RunNotFoundError(HistoryError):
    """No run with that id in the history (or no run at all)."""


class NoTraceError(HistoryError):
    """The launch was recorded without an access trace (it failed before any memory access, say)."""


class QueryError(HistoryError):
    """The database rejected a query: bad SQL, an unknown table or column."""


class QueryTimeoutError(QueryError):
    """A query ran past the time limit it was given and was stopped; nothing was changed."""


class QueryInterruptedError(QueryError):
    """A query was stopped on request (Ctrl-C); ``tilelens`` exits 130, as a shell does for SIGINT."""

    exit_code = 130


class ViewsMissingError(QueryError):
    """The query names a view that this history's schema predates; upgrading the schema adds it."""


class ReadOnlyError(HistoryError):
    """A statement tried to change the history (or reach outside it) through a read-only connection."""


class BlobFolderError(HistoryError):
    """The blob folder cannot be written: it is a file, or this process may not write there."""


class BlobError(HistoryError):
    def __init__(self, sha256: str, path: Path, message: str) -> None:
        self.sha256 = sha256
        self.path = path
        super().__init__(message)


class BlobMissingError(BlobError):
    def __init__(self, sha256: str, path: Path) -> None:
        super().__init__(sha256, path, f"blob {sha256} is missing (expected at {path})")


class BlobCorruptError(BlobError):
    def __init__(self, sha256: str, path: Path, actual: str) -> None:
        self.actual = actual
        super().__init__(sha256, path, f"blob {sha256} is corrupt: its content hashes to {actual} ({path})")


class TensorCodecError(HistoryError, ValueError):
    """A tensor that cannot be stored, or stored data that is not a tensor this code can rebuild."""


# -- replay -------------------------------------------------------------------------------------------------


class ReplayFailure(TileLensError):
    """A replay that cannot go on; its message is the one line the user sees (and the replay row keeps).

    ``replay_launch`` turns it into an ``error`` outcome; it reaches callers only through that result.
    ``reason`` names the refusals a front end may want to explain further (``"source-changed"``).
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
