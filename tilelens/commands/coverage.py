"""``tilelens coverage``: which lines of each kernel version the recorded launches ran, and with what masks.

Thin over :func:`tilelens.api.coverage`; the rules are in docs/coverage.md. Exit 0 with a report, 2 on an error
(no launch selected, a bad folder). A read command: it opens the history read-only.
"""

from __future__ import annotations

import typer

from tilelens import api
from tilelens.commands.common import JSON_OPTION, print_json, state
from tilelens.commands.escape import escape

HELP = (
    "Coverage of kernels, from the recorded launches: per kernel version and source line, whether it ran, in "
    "how many launches and tests, with how many active and masked lanes; the statements no launch ran "
    "(Missing); and boundary gaps: masked accesses that were never partly active in any launch (no launch "
    "exercised a partial tail). Lines that only compute are known for launches recorded with "
    "`tilelens record --coverage` (or pytest --tilelens-coverage); other launches count their memory lines "
    "only.\n\n"
    "Examples:\n\n"
    "  tilelens coverage --run 7\n\n"
    "  tilelens coverage --test 'tests/test_add.py::*' --kernel add_kernel\n\n"
    "  tilelens coverage --html coverage-report\n\n"
    "  tilelens coverage --json | jq '.kernels[] | {name, missing}'\n"
)


def register(app: typer.Typer) -> None:
    app.command("coverage", help=HELP)(coverage)


def coverage(
    ctx: typer.Context,
    run: int | None = typer.Option(None, "--run", metavar="ID", help="Launches of this run only."),
    test: str | None = typer.Option(
        None, "--test", metavar="PATTERN", help="Launches of tests whose node id matches (*, ? or a part)."
    ),
    kernel: str | None = typer.Option(
        None, "--kernel", metavar="NAME", help="This kernel only (qualname or module.qualname, * and ?)."
    ),
    html: str | None = typer.Option(
        None,
        "--html",
        metavar="DIR",
        help="Also write a static HTML report (index and annotated source per kernel) into DIR: a new or "
        "empty folder, or an earlier coverage report, which is replaced.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    st = state(ctx)
    with api.open_query(st.db, st.blobs) as q:
        report = api.coverage(q, run=run, test=test, kernel=kernel)
    files = api.write_coverage_html(report, html) if html is not None else None
    if as_json:
        out = report.as_dict()
        if html is not None:
            out["html"] = {"path": html, "files": files}
        print_json(out)
        return
    lines = api.coverage_lines(report)
    if html is not None:
        lines.append(f"HTML report: {html}/index.html")
    typer.echo("\n".join(escape(line) for line in lines))  # plain lines: never wrapped nor styled
