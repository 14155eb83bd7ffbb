"""``tilelens check`` on recorded kernels (tests/race_kernels.py): one per kind of finding, and clean ones.

Every expected element, program and line below is worked out from the kernel and its launch in
tests/race_kernels.py (the comment beside each says how).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import race_kernels as rk
from tests import store_helpers
from tests.end_to_end.conftest import ROOT, one_line_error, tilelens_in_process
from tests.race_kernels import Recorded, line_of
from tilelens.store import History

NAME = "tests.race_kernels"


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return rk.record(tmp_path_factory.mktemp("check"))


def cli(rec: Recorded, *args: object):  # noqa: ANN201 - the conftest's Output
    return tilelens_in_process("--db", rec.db, "--blobs", rec.blobs, "check", *args)


def source(text: str) -> str:
    """The stripped source line of tests/race_kernels.py that contains ``text``, as ``check`` quotes it."""
    return Path(rk.__file__).read_text().splitlines()[line_of(text) - 1].strip()


@pytest.mark.parametrize("kernel", ["disjoint_blocks", "shared_inputs", "in_place", "atomic_total"])
def test_clean_kernels_have_no_findings(rec: Recorded, kernel: str) -> None:
    launch = rec.launches[kernel]
    out = cli(rec, launch)
    assert (out.returncode, out.stdout) == (
        0,
        f"launch {launch}  {NAME}.{kernel}  grid (4, 1, 1): no findings\n",
    )


def test_a_lock_guarded_accumulation_is_synchronized_not_a_race(rec: Recorded) -> None:
    """6 programs in 2 groups (pid % 2) accumulate 8 elements each into acc[group], under lock[group]; the first
    of a group (pids 0, 1) sets count[group] (lock_ptr[2 + group]) with an xchg, the others (2..5) read it and
    acc. The lock's own take (cas) and release (xchg) are the protocol, not accesses."""
    launch = rec.launches["locked_accumulate"]
    out = cli(rec, launch)
    store, load = line_of("tl.store(acc_ptr + group * N"), line_of("part += tl.load(acc_ptr")
    count_load, count_xchg = line_of("if tl.load(count) == 0"), line_of("tl.atomic_xchg(count, 1)")
    take = line_of("while tl.atomic_cas(lock, 0, 1) == 1")
    locks = f"under 2 locks lock_ptr[0], lock_ptr[1] taken at line {take}"
    acc = "acc_ptr[0], acc_ptr[1], acc_ptr[2] ... acc_ptr[15]"
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"launch {launch}  {NAME}.locked_accumulate  grid (6, 1, 1): no findings",
        f"  synchronized  acc_ptr: 16 elements (write-write) {locks}: {acc}",
        f"      store line {store} by 6 programs (0, 1, 2 ...): {source('tl.store(acc_ptr + group * N')}",
        f"  synchronized  acc_ptr: 16 elements (read-write) {locks}: {acc}",
        f"      load line {load} by 4 programs (2, 3, 4 ...): {source('part += tl.load(acc_ptr')}",
        f"      store line {store} by 6 programs (0, 1, 2 ...): {source('tl.store(acc_ptr + group * N')}",
        f"  synchronized  lock_ptr: 2 elements (mixed-atomic) {locks}: lock_ptr[2], lock_ptr[3]",
        f"      load line {count_load} by 4 programs (2, 3, 4 ...): {source('if tl.load(count) == 0')}",
        f"      atomic_xchg line {count_xchg} by 2 programs (0, 1): {source('tl.atomic_xchg(count, 1)')}",
    ]


def test_programs_storing_one_block_are_one_write_write_finding(rec: Recorded) -> None:
    launch = rec.launches["same_block"]  # 4 programs store y[0..15]
    out = cli(rec, launch)
    text = "every program stores the same block"
    assert (out.returncode, out.stdout.splitlines()) == (
        1,
        [
            f"launch {launch}  {NAME}.same_block  grid (4, 1, 1): 1 finding",
            "  write-write  y_ptr: 16 elements of 16 written by several programs with plain stores: "
            "y_ptr[0], y_ptr[1], y_ptr[2] ... y_ptr[15]",
            f"      store line {line_of(text)} by 4 programs (0, 1, 2 ...): {source(text)}",
        ],
    )


def test_a_read_of_the_next_programs_element_is_a_read_write_hazard(rec: Recorded) -> None:
    """Program p reads x[16p + 1 .. 16p + 16] and writes x[16p .. 16p + 15]: x[16], x[32], x[48] are read by
    programs 0, 1, 2 and written by 1, 2, 3."""
    launch = rec.launches["shift_in_place"]
    out = cli(rec, launch)
    read, write = "reads the next program's first element", "tl.store(x_ptr + offs, v, mask=offs < n)"
    assert (out.returncode, out.stdout.splitlines()) == (
        1,
        [
            f"launch {launch}  {NAME}.shift_in_place  grid (4, 1, 1): 1 finding",
            "  read-write  x_ptr: 3 elements of 64 read by one program and written by another with plain "
            "accesses: x_ptr[16], x_ptr[32], x_ptr[48]",
            f"      load line {line_of(read)} by 3 programs (0, 1, 2): {source(read)}",
            f"      store line {line_of(write)} by 3 programs (1, 2, 3): {source(write)}",
        ],
    )


def test_a_plain_read_of_an_atomic_total_is_mixed(rec: Recorded) -> None:
    launch = rec.launches["plain_and_atomic"]
    out = cli(rec, launch)
    plain, atomic = "plain read of an atomic total", "tl.atomic_add(total_ptr, tl.sum"
    assert (out.returncode, out.stdout.splitlines()) == (
        1,
        [
            f"launch {launch}  {NAME}.plain_and_atomic  grid (4, 1, 1): 1 finding",
            "  mixed-atomic  total_ptr: 1 element of 1 accessed plainly by one program and atomically by "
            "another: total_ptr[0]",
            f"      load line {line_of(plain)} by 4 programs (0, 1, 2 ...): {source(plain)}",
            f"      atomic_fadd line {line_of(atomic)} by 4 programs (0, 1, 2 ...): {source(atomic)}",
        ],
    )


def test_a_lock_per_program_synchronizes_nothing(rec: Recorded) -> None:
    launch = rec.launches["own_lock"]  # 3 programs, each under lock_ptr[pid], read and write acc[0..7]
    out = cli(rec, launch)
    load, store = "total = tl.load(acc_ptr + cols) + part", "tl.store(acc_ptr + cols, total)"
    assert (out.returncode, out.stdout.splitlines()) == (
        1,
        [
            f"launch {launch}  {NAME}.own_lock  grid (3, 1, 1): 2 findings",
            "  write-write  acc_ptr: 8 elements of 8 written by several programs with plain stores: "
            "acc_ptr[0], acc_ptr[1], acc_ptr[2] ... acc_ptr[7]",
            f"      store line {line_of(store)} by 3 programs (0, 1, 2): {source(store)}",
            "  read-write  acc_ptr: 8 elements of 8 read by one program and written by another with plain "
            "accesses: acc_ptr[0], acc_ptr[1], acc_ptr[2] ... acc_ptr[7]",
            f"      load line {line_of(load)} by 3 programs (0, 1, 2): {source(load)}",
            f"      store line {line_of(store)} by 3 programs (0, 1, 2): {source(store)}",
        ],
    )


def test_out_of_bounds_lanes_are_findings_too(rec: Recorded) -> None:
    launch = rec.launches["tail_copy"]  # x, y: 40 elements, 3 blocks of 16: program 2's lanes 40..47
    out = cli(rec, launch)
    text = "no mask, x and y are shorter"
    assert (out.returncode, out.stdout.splitlines()) == (
        1,
        [
            f"launch {launch}  {NAME}.tail_copy  grid (3, 1, 1): 2 findings",
            "  out-of-bounds  x_ptr: 8 lanes in 1 event outside the view, element offsets 40..47 "
            "(x_ptr has 40 elements)",
            f"      load line {line_of(text)} by 1 program (2): {source(text)}",
            "  out-of-bounds  y_ptr: 8 lanes in 1 event outside the view, element offsets 40..47 "
            "(y_ptr has 40 elements)",
            f"      store line {line_of(text)} by 1 program (2): {source(text)}",
        ],
    )


def test_json_names_kind_argument_elements_programs_and_lines(rec: Recorded) -> None:
    launch = rec.launches["shift_in_place"]
    out = cli(rec, launch, "--json")
    assert out.returncode == 1
    data = json.loads(out.stdout)
    assert data["findings"] == 1 and [c["launch_id"] for c in data["launches"]] == [launch]
    (f,) = data["launches"][0]["findings"]
    assert (f["kind"], f["arg"], f["arg_name"], f["numel"]) == ("read-write", 0, "x_ptr", 64)
    assert f["elements"] == {
        "count": 3,
        "first": [[16], [32], [48]],
        "last": [48],
        "first_offsets": [16, 32, 48],
        "last_offset": 48,
    }
    assert [(s["ops"], s["line"], s["programs"], s["first_programs"]) for s in f["sides"]] == [
        (["load"], line_of("reads the next program's"), 3, [[0, 0, 0], [1, 0, 0], [2, 0, 0]]),
        (["store"], line_of("tl.store(x_ptr + offs, v, mask"), 3, [[1, 0, 0], [2, 0, 0], [3, 0, 0]]),
    ]


def test_a_run_ends_with_a_summary_and_fail_on_picks_the_kinds(rec: Recorded) -> None:
    out = cli(rec, "--run", rec.run_id)
    summary = (
        "10 launches checked: 7 findings in 5 launches (write-write 2, read-write 2, mixed-atomic 1, "
        "out-of-bounds 2)"
    )
    assert (out.returncode, out.stdout.splitlines()[-1]) == (1, summary)
    assert cli(rec, "--last").stdout == out.stdout
    assert cli(rec, "--last", "--fail-on", "mixed-atomic, out-of-bounds").returncode == 1
    only = cli(rec, rec.launches["shift_in_place"], "--fail-on", "write-write,mixed-atomic")
    assert (only.returncode, only.stdout.splitlines()[1].split(":")[0]) == (0, "  read-write  x_ptr")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give launch IDs, or --run ID, or --last"),
        (("1", "--last"), "give launch IDs, or --run ID, or --last"),
        (("--run", "1", "--last"), "give --run ID or --last, not both"),
        (("1", "--fail-on", "races"), "unknown finding kind 'races'"),
        (("999",), "no launch 999 in history"),
        (("--run", "999"), "no run 999 in the history"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(rec: Recorded, args: tuple[str, ...], message: str) -> None:
    assert message in one_line_error(cli(rec, *args))


def test_a_launch_without_a_trace(tmp_path: Path, rec: Recorded) -> None:
    """Named by its id it is an error; in a run it is listed as not checked, and the run's exit status is the
    findings' alone."""
    db, blobs = tmp_path / "h.db", tmp_path / "blobs"
    with History.open(str(db), blobs) as h:
        run = h.begin_run(store_helpers.run_info())
        launch = h.write_launch(run, store_helpers.launch())
    where = Recorded(db, blobs, {}, run)
    message = one_line_error(cli(where, launch))
    assert message == f"tilelens: error: launch {launch} has no access trace"
    out = cli(where, "--run", run)
    assert (out.returncode, out.stdout.splitlines()) == (
        0,
        [
            f"launch {launch}  tests.kernels.add_kernel  grid (4, 1, 1): not checked: launch {launch} has no "
            "access trace",
            "0 launches checked: no findings; 1 not checked (no access trace)",
        ],
    )


def test_check_writes_nothing_and_imports_neither_torch_triton_nor_sqlalchemy(rec: Recorded) -> None:
    before = rec.db.read_bytes()
    code = (
        "import sys; from tilelens.cli import main; "
        f"code = main(['--db', {str(rec.db)!r}, '--blobs', {str(rec.blobs)!r}, 'check', '--last']); "
        "print(code, sorted(m for m in ('torch', 'triton', 'sqlalchemy', 'alembic') if m in sys.modules), "
        "file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "1 []"
    assert rec.db.read_bytes() == before


def test_a_copy_on_postgresql_has_the_same_findings(
    rec: Recorded, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from tilelens.store.admin.copy import copy_history

    server = request.getfixturevalue("postgres_server")
    url, blobs = server.url(server.create_database("check")), tmp_path / "blobs"
    with History.open(str(rec.db), rec.blobs) as src, History.open(url, blobs) as dst:
        copy_history(src, dst)
    on_sqlite = cli(rec, "--last", "--json")
    on_postgres = tilelens_in_process("--db", url, "--blobs", blobs, "check", "--last", "--json")
    assert on_postgres.returncode == on_sqlite.returncode == 1
    assert json.loads(on_postgres.stdout) == json.loads(on_sqlite.stdout)
