"""What ``tilelens replay`` and ``tilelens trace`` print: one replay's outcome, or a table of many."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from tilelens.commands import render
from tilelens.commands.common import console, print_json
from tilelens.commands.escape import escape
from tilelens.commands.ls_table import fold_name
from tilelens.records import REPLAY_OUTCOMES

if TYPE_CHECKING:
    from tilelens.api import ReplayResult

_STYLE = {"match": "green", "mismatch": "red", "error": "yellow", "unknown-read": "red"}
# What to type when a replay was refused (the result's own message names no flags).
_REFUSAL_HINTS = {
    "source-changed": "--allow-changed replays it anyway, --from-history --trust-source runs the recorded source",
    "file-changed": "--allow-changed runs the file as it is now",
}


def show_one(result: ReplayResult, as_json: bool) -> None:
    if as_json:
        print_json(result.to_dict())
        return
    if result.outcome == "error":
        print(f"tilelens: error: {escape(' '.join(_with_hint(result).split()))}", file=sys.stderr)
        return
    out = console()
    style = _STYLE[result.outcome]
    if not result.details:
        out.print(Text.assemble((result.outcome, style), escape(f": {result.message}")))
        return
    # A mismatch can name several tensors and a trace event: one line each reads better than one long line.
    out.print(Text.assemble((result.outcome, style), escape(f": {result.headline}:")))
    for detail in result.details:
        out.print(Text(f"  {escape(str(detail))}"))


def show_many(results: list[ReplayResult], as_json: bool) -> None:
    counts = {k: sum(r.outcome == k for r in results) for k in REPLAY_OUTCOMES}
    if as_json:
        print_json({"results": [r.to_dict() for r in results], "summary": counts})
        return
    out = render.out()
    table = _table(results, [(r.kernel,) for r in results])
    over = render.fit(out, table, widen=False)
    if over:  # kernel names fold after a module dot first (never inside their own name), then lines grow
        width = max(len(r.kernel) for r in results) - over
        table = _table(results, [fold_name(r.kernel, r.kernel.rsplit(".", 1)[-1], width) for r in results])
        render.fit(out, table)
    out.print(table)
    for r in results:
        if r.outcome != "match":
            out.print(Text.assemble((r.outcome, _STYLE[r.outcome]), escape(f": {_with_hint(r)}")))
    out.print(
        f"{len(results)} replayed: {counts['match']} match, {counts['mismatch']} mismatch, {counts['error']} error"
    )


def _table(results: list[ReplayResult], kernels: list[tuple[str, ...]]) -> Table:
    table = Table("id", "kernel", "device", "outcome", "trace", "max err", "secs", box=box.SIMPLE_HEAD)
    for column in table.columns:
        column.no_wrap = True  # each value whole on its line (render.fit)
    for r, kernel in zip(results, kernels):
        trace = {True: "equal", False: "differs", None: "-"}[r.trace_equal]
        err = "-" if r.max_abs_err is None else f"{r.max_abs_err:.3g}"
        table.add_row(
            str(r.launch_id),
            render.lines(kernel),
            render.cell(r.device),
            render.cell(r.outcome, _STYLE[r.outcome]),
            trace,
            err,
            f"{r.duration_s:.3f}",
        )
    return table


def _with_hint(result: ReplayResult) -> str:
    hint = _REFUSAL_HINTS.get(result.refusal or "")
    return f"{result.message}; {hint}" if hint else result.message
