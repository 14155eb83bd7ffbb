"""Buggy kernels are first-class: out-of-bounds stores contained and recorded, OOB reads replayed bit for bit.

The dangerous kernels run in a process of their own (tests/oob_programs.py), so a regression in the bounds guard
fails these tests instead of killing the worker. Every expected count below is worked out by hand from the
kernel and its launch, in the comment beside it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

import tilelens
from tests import oob_kernels as k
from tests.end_to_end.conftest import ROOT, tilelens_in_process
from tests.end_to_end.conftest import tilelens as tilelens_cli
from tilelens.core import compat
from tilelens.replay import oobreads
from tilelens.replay.rebuild import rebuild_arguments
from tilelens.store import History
from tilelens.store.read.launches import load_launch
from tilelens.store.read.query import open_query
from tilelens.store.read.results import LaunchDetail


def kernel_line(text: str) -> int:
    """Line number in tests/oob_kernels.py of the first line containing ``text``."""
    lines = Path(k.__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@dataclass(frozen=True)
class Programs:
    results: dict
    db: Path
    blobs: Path

    def detail(self, launch_id: int) -> LaunchDetail:
        with open_query(str(self.db), self.blobs) as q:
            return q.launch(launch_id, oob_events=10)

    def cli(self, *args: object):
        return tilelens_in_process("--db", self.db, "--blobs", self.blobs, *args)


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    tmp = tmp_path_factory.mktemp("oob-programs")
    db, blobs, out = tmp / "h.db", tmp / "blobs", tmp / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.oob_programs", str(out), str(db), str(blobs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"the out-of-bounds programs died with status {proc.returncode}:\n{proc.stderr}"
    )
    return Programs(json.loads(out.read_text()), db, blobs)


def check_contained(case: dict, launches: int) -> None:
    """The program survived, wrote no byte outside its arguments, and every launch replays bit for bit."""
    assert len(case["launches"]) == launches
    assert case["canaries"], "a byte outside every argument changed"
    for outcome, trace_equal, message in case["replays"]:
        assert (outcome, trace_equal) == ("match", True), message


def oob_counts(d: LaunchDetail) -> tuple[int | None, ...]:
    s = d.launch
    return (s.oob_lanes, s.oob_load_lanes, s.oob_store_lanes, s.dropped_lanes)


def events(d: LaunchDetail) -> list[tuple]:
    return [(e.pid, e.op, e.arg_name, e.line, e.oob_lanes, e.stray_lanes, e.offsets) for e in d.oob_events]


# -- stores and atomics never touch memory outside the arguments ----------------------------------------------


def test_unmasked_tail_store(programs: Programs) -> None:
    case = programs.results["tail_store"]
    check_contained(case, launches=3)
    assert case["same_as_correct"], "the 1000 in-bounds lanes differ from the masked kernel's"
    line = kernel_line("tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)")
    for launch_id in case["launches"]:
        d = programs.detail(launch_id)
        # 1024 lanes into 1000 elements: lanes 1000..1023 land past y, in no argument's memory: dropped.
        assert oob_counts(d) == (24, 0, 24, 24)
        assert d.launch.active_lanes == 1024 + 1024
        assert events(d) == [((0, 0, 0), "store", "y_ptr", line, 24, 24, (1000, 1023))]


def test_transposed_write_with_the_mask_on_the_wrong_axis(programs: Programs) -> None:
    case = programs.results["transpose"]
    check_contained(case, launches=1)
    assert case["same_as_hand"] and case["written_lanes_same_as_correct"]
    d = programs.detail(case["launches"][0])
    # Program (0, 0): the wrong mask keeps rows i < 24 (N) and columns j < 32 (all, since M = 40): 768 lanes.
    # Lane (i, j) stores at j * 40 + i; y has 24 * 40 = 960 elements, so j = 24..31 fall past it: 8 * 24 = 192,
    # offsets 24 * 40 + 0 = 960 to 31 * 40 + 23 = 1263. Program (1, 0) has rows 32..63: no active lane.
    assert oob_counts(d) == (192, 0, 192, 192)
    assert d.summary["store_lanes"] == 768
    line = kernel_line("tl.store(y_ptr + rn[None, :] * M + rm[:, None], x, mask=mask)")
    assert events(d) == [((0, 0, 0), "store", "y_ptr", line, 192, 192, (960, 1263))]


def test_scatter_and_gather_ten_million_elements_away(programs: Programs) -> None:
    scatter, gather = programs.results["scatter"], programs.results["gather"]
    check_contained(scatter, launches=1)
    check_contained(gather, launches=1)
    assert scatter["same_as_hand"] and gather["in_bounds_same"]
    # Six stray indices: program 0 (lanes 0..127) has lanes 5 (+10M) and 17 (-10M); program 1 has lanes 130
    # (+9,999,999), 200 (1000, one past the end), 201 (-1) and 250 (-9,999,999).
    d = programs.detail(scatter["launches"][0])
    assert oob_counts(d) == (6, 0, 6, 6)
    line = kernel_line("tl.store(y_ptr + idx, tl.load(x_ptr + offs, mask=mask), mask=mask)")
    assert events(d) == [
        ((0, 0, 0), "store", "y_ptr", line, 2, 2, (-10_000_000, 10_000_000)),
        ((1, 0, 0), "store", "y_ptr", line, 4, 4, (-9_999_999, 9_999_999)),
    ]
    d = programs.detail(gather["launches"][0])
    assert oob_counts(d) == (6, 6, 0, 0)
    line = kernel_line("tl.store(y_ptr + offs, tl.load(x_ptr + idx, mask=mask), mask=mask)")
    assert [e[:6] for e in events(d)] == [
        ((0, 0, 0), "load", "x_ptr", line, 2, 2),
        ((1, 0, 0), "load", "x_ptr", line, 4, 4),
    ]
    # One element past either end lies within reach: read as the stock interpreter reads it (the arena's
    # canary); ten million elements away is never read: 0.
    assert gather["values"] == {"5": 0.0, "17": 0.0, "130": 0.0, "250": 0.0, "200": -7.0, "201": -7.0}


def test_atomic_add_past_the_end(programs: Programs) -> None:
    case = programs.results["atomic_add"]
    check_contained(case, launches=1)
    idx = np.arange(64) % 20
    idx[63] = -5_000_000
    counts, old = np.zeros(16), np.zeros(64)
    for lane, i in enumerate(idx):  # lanes apply in order; a dropped lane returns 0 and adds nothing
        if 0 <= i < 16:
            old[lane] = counts[i]
            counts[i] += 1
    assert case["counts"] == counts.tolist() and case["old"] == old.tolist()
    d = programs.detail(case["launches"][0])
    # idx = lane % 20 reaches 16..19 on lanes 16-19, 36-39, 56-59 (12), plus lane 63 at -5,000,000: 13 dropped.
    assert oob_counts(d) == (13, 0, 13, 13)
    line = kernel_line("old = tl.atomic_add(counts_ptr + idx, 1.0, mask=mask)")
    assert events(d) == [((0, 0, 0), "atomic_fadd", "counts_ptr", line, 13, 13, (-5_000_000, 19))]


def test_atomic_cas_past_the_end(programs: Programs) -> None:
    case = programs.results["atomic_cas"]
    check_contained(case, launches=1)
    assert case["flags"] == [1] * 40 and case["old"] == [0] * 64
    d = programs.detail(case["launches"][0])
    # 64 lanes over 40 flags: lanes 40..63 (24) are past the end; atomic_cas has no mask, all are active.
    assert oob_counts(d) == (24, 0, 24, 24)
    line = kernel_line("old = tl.atomic_cas(flags_ptr + offs, zero, one)")
    assert events(d) == [((0, 0, 0), "atomic_cas", "flags_ptr", line, 24, 24, (40, 63))]


@pytest.mark.skipif(not compat.HAS_BLOCK_POINTERS, reason=compat.NO_BLOCK_POINTERS)
def test_block_pointer_store_past_the_edge(programs: Programs) -> None:
    case = programs.results["block_ptr"]
    check_contained(case, launches=1)
    assert case["same_as_correct"]
    d = programs.detail(case["launches"][0])
    # Program 1 stores rows 32..63 of a 40-row, 32-column y: rows 40..63 (24 * 32 = 768 lanes) are past it,
    # element offsets 40 * 32 = 1280 to 63 * 32 + 31 = 2047.
    assert oob_counts(d) == (768, 0, 768, 768)
    line = kernel_line("tl.store(dst, tl.load(src, boundary_check=(0, 1)) + 1.0)")
    assert events(d) == [((1, 0, 0), "store", "y_ptr", line, 768, 768, (1280, 2047))]


def test_tensor_descriptor_store_past_the_edge(programs: Programs) -> None:
    case = programs.results["descriptor"]
    check_contained(case, launches=1)
    assert case["same_as_correct"]
    d = programs.detail(case["launches"][0])
    # The descriptor claims 48 rows; program 1 stores rows 32..63, the descriptor masks rows 48..63 off and
    # rows 40..47 (8 * 32 = 256 lanes, offsets 1280..1535) are past the 40-row y.
    assert oob_counts(d) == (256, 0, 256, 256)
    line = kernel_line("dst.store([pid * BM, 0], src.load([pid * BM, 0]) + 1.0)")
    assert events(d) == [((1, 0, 0), "store", "y_ptr", line, 256, 256, (1280, 1535))]


def test_store_into_a_view_lands_in_its_parent(programs: Programs) -> None:
    case = programs.results["view_into_parent"]
    check_contained(case, launches=1)
    assert case["view_same_as_correct"] and case["parent_tail_written"] and case["parent_rest_untouched"]
    d = programs.detail(case["launches"][0])
    # 512 lanes into a 500-element view of a 2000-element parent: lanes 500..511 are outside the view but
    # inside the parent's storage, so they are out of bounds and written (not dropped), as compiled code would.
    assert oob_counts(d) == (12, 0, 12, 0)
    line = kernel_line("tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)")
    assert events(d) == [((0, 0, 0), "store", "y_ptr", line, 12, 0, (500, 511))]


# -- show, ls, the views ------------------------------------------------------------------------------------


def test_show_names_oob_stores_and_what_became_of_them(programs: Programs) -> None:
    tail = programs.results["tail_store"]["launches"][0]
    out = programs.cli("show", tail)
    assert out.returncode == 0, out.stderr
    line = kernel_line("tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)")
    for expected in (
        "24 lanes out of bounds (0 loaded, 24 stored, 24 of them dropped: outside every argument's memory)",
        f"pid (0, 0, 0)  store y_ptr  line {line}: 24 of 1024 active lanes outside, element offsets 1000..1023 "
        "(y_ptr has 1000 elements); not written: outside every argument's memory",
    ):
        assert expected in out.stdout, expected
    view = programs.results["view_into_parent"]["launches"][0]
    out = programs.cli("show", view)
    assert "12 lanes out of bounds (0 loaded, 12 stored)" in out.stdout
    assert "written into memory of the same storage (outside the view)" in out.stdout


def test_ls_oob_and_the_oob_launches_view_include_store_only_launches(programs: Programs) -> None:
    buggy = sorted(i for case in programs.results.values() for i in case["launches"])
    out = programs.cli("ls", "--oob", "--json", "--limit", "100")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert sorted(r["id"] for r in rows) == buggy  # the correct reference launches have none
    by_id = {r["id"]: r for r in rows}
    cas = by_id[programs.results["atomic_cas"]["launches"][0]]
    assert (cas["oob_lanes"], cas["oob_load_lanes"], cas["oob_store_lanes"], cas["dropped_lanes"]) == (
        24, 0, 24, 24,
    )  # fmt: skip
    out = programs.cli(
        "sql", "--format", "json",
        "SELECT launch_id, oob_lanes, oob_load_lanes, oob_store_lanes, dropped_lanes FROM oob_launches "
        "ORDER BY launch_id",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert [r["launch_id"] for r in view] == buggy
    gather = next(r for r in view if r["launch_id"] == programs.results["gather"]["launches"][0])
    assert (gather["oob_load_lanes"], gather["oob_store_lanes"], gather["dropped_lanes"]) == (6, 0, 0)


def test_a_far_stray_launch_cannot_be_reproduced_on_a_gpu(programs: Programs) -> None:
    with History.open(str(programs.db), programs.blobs) as h:
        for name, verb in (("scatter", "wrote"), ("gather", "read")):
            spec = load_launch(h, programs.results[name]["launches"][0])
            layout = oobreads.gpu_layout(h.blobs.get_table(spec.trace_blob), spec)
            problem = layout.problem(spec.id)
            # Four lanes 10 million elements away; the one-past-either-end lanes are within reach.
            assert problem is not None and f"4 lanes {verb} memory more than 64 KiB" in problem
            assert "cannot be reproduced on a GPU" in problem


# -- the policy --------------------------------------------------------------------------------------------


def test_on_oob_raise_records_the_launch_then_raises(tmp_path: Path) -> None:
    from tests.oob_programs import Arena

    x = torch.arange(1024, dtype=torch.float32)
    y = Arena(1000, 4096)
    db = str(tmp_path / "h.db")
    with tilelens.record(db, on_oob="raise") as rec:
        with pytest.raises(tilelens.OutOfBoundsError) as caught:
            k.tail_store[(1,)](x, y.tensor, BLOCK=1024)
        k.tail_store_masked[(1,)](x, y.tensor, 1000, BLOCK=1024)  # the program goes on
    assert y.canaries_intact() and torch.equal(y.tensor, x[:1000] * 2.0)
    first = rec.launch_ids[0]
    line = kernel_line("tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)")
    assert str(caught.value) == (
        f"TileLens: kernel tests.oob_kernels.tail_store: store out of bounds at line {line} "
        "(`tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)  # BUG: no mask, y is shorter than a block`), "
        "program (0, 0, 0), argument y_ptr (1,000 elements): 24 of 1024 active lanes outside, element offsets "
        "1,000..1,023, up to 24 elements past its end; in all 0 load and 24 store/atomic lanes out of bounds "
        f"(24 dropped: outside every argument's memory, never written); recorded as launch {first}"
    )
    with open_query(db) as q:
        assert [(s.id, s.oob_lanes) for s in q.launches()] == [(first + 1, 0), (first, 24)]


def test_on_oob_must_be_a_known_policy(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="on_oob must be one of record, raise"):
        tilelens.record(str(tmp_path / "h.db"), on_oob="ignore")  # type: ignore[arg-type]


PROGRAM = """
import sys
sys.path.insert(0, {root!r})
import torch
from tests import oob_kernels as k
from tests.oob_programs import Arena

x = torch.arange(1024, dtype=torch.float32)
y = Arena(1000, 4096)
for _ in range(3):
    k.tail_store[(1,)](x, y.tensor, BLOCK=1024)
print("done", y.canaries_intact())
"""


def test_cli_fail_on_oob_exits_3_after_the_program_ran(tmp_path: Path) -> None:
    script = tmp_path / "tail.py"
    script.write_text(textwrap.dedent(PROGRAM.format(root=str(ROOT))))
    proc = tilelens_cli("--db", tmp_path / "h.db", "record", "--fail-on-oob", script)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "done True\n"
    assert (
        "3 launches of 1 kernel, 0 errors, 72 out-of-bounds lanes (0 loaded, 72 stored, 72 of them dropped: "
        "outside every argument's memory)"
    ) in proc.stderr
    assert "--fail-on-oob: 72 lanes were out of bounds; exiting with status 3" in proc.stderr
    clean = tmp_path / "clean.py"
    clean.write_text(textwrap.dedent(PROGRAM.format(root=str(ROOT)).replace("range(3)", "range(0)")))
    proc = tilelens_cli("--db", tmp_path / "h.db", "record", "--fail-on-oob", clean)
    assert proc.returncode == 0, proc.stderr


def test_cli_on_oob_raise_stops_the_program_at_the_first_bad_launch(tmp_path: Path) -> None:
    script = tmp_path / "tail.py"
    script.write_text(textwrap.dedent(PROGRAM.format(root=str(ROOT))))
    proc = tilelens_cli("--db", tmp_path / "h.db", "record", "--on-oob", "raise", script)
    assert proc.returncode == 1 and proc.stdout == ""
    assert (
        "OutOfBoundsError: TileLens: kernel tests.oob_kernels.tail_store: store out of bounds" in proc.stderr
    )
    assert "1 launch of 1 kernel, 0 errors, 24 out-of-bounds lanes" in proc.stderr
    proc = tilelens_cli("--db", tmp_path / "h.db", "record", "--on-oob", "maybe", script)
    assert proc.returncode == 2 and "--on-oob" in proc.stderr and "must be record or raise" in proc.stderr


# -- replay reproduces out-of-bounds reads ------------------------------------------------------------------


def _record_shifts(db: str) -> tuple[list[int], torch.Tensor]:
    from tests.oob_programs import Arena

    torch.manual_seed(3)
    x = torch.randn(1000)  # a plain tensor: the stray lanes read whatever lies past its allocation
    parent = torch.rand(2000)
    view = parent[500:1500]  # a view: the stray lanes read the parent's next elements
    canaried = Arena(1000, 64, fill=np.linspace(-1, 1, 1000, dtype=np.float32))
    outs = [torch.empty(1000) for _ in range(3)]
    with tilelens.record(db) as rec:
        for src, out in zip((x, view, canaried.tensor), outs):
            k.shift[(8,)](src, out, 1000, BLOCK=128)
    assert torch.equal(outs[1][-1:], parent[1500:1501])  # read as compiled code would
    assert outs[2][-1].item() == -7.0  # the canary just past the arena slice, read through the safe path
    return list(rec.launch_ids), parent


def test_replays_of_oob_reads_match_bit_for_bit(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    ids, _parent = _record_shifts(db)
    with History.open(db) as h:
        for launch_id in ids:
            spec = load_launch(h, launch_id)
            trace = h.blobs.get_table(spec.trace_blob)
            # Lanes 999..1023 load x[1000..1024]: 25 out-of-bounds lanes in the last program, 4 bytes each.
            rows = [r for r in trace.to_pylist() if r["oob"]]
            assert [(r["pid_x"], r["op"], r["oob"], len(r["oob_values"])) for r in rows] == [
                (7, "load", 25, 100)
            ]
            result = tilelens.replay_launch(h, launch_id)
            assert (result.outcome, result.trace_equal) == ("match", True), result.message


def test_without_the_recorded_values_the_view_replay_would_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "h.db")
    ids, _parent = _record_shifts(db)
    monkeypatch.setattr(oobreads, "cpu_reads", lambda trace: None)
    with History.open(db) as h:
        result = tilelens.replay_launch(h, ids[1])
    # The rebuilt parent is zeros past the view; only the recorded values make the stray lane read 0.xx again.
    assert result.outcome == "mismatch" and "y_ptr[999] differs" in result.message


def test_gpu_layout_places_the_recorded_bytes_where_the_stray_lanes_read(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    ids, parent = _record_shifts(db)
    margin = oobreads.GPU_MARGIN_BYTES
    with History.open(db) as h:
        spec = load_launch(h, ids[1])
        layout = oobreads.gpu_layout(h.blobs.get_table(spec.trace_blob), spec)
        assert layout.problem(spec.id) is None
        # The 25 lanes read view[1000..1024] = parent[1500..1524]: bytes (500 + 1000..1024) * 4 of the storage.
        (pieces,) = layout.pieces.values()
        assert [pos for pos, _ in pieces] == [(1500 + i) * 4 for i in range(25)]
        rebuilt = rebuild_arguments(h.blobs, spec, torch.device("cpu"), layout.pieces, margin)
    x = next(t.view for t in rebuilt.tensors if t.spec.name == "x_ptr")
    assert x.storage_offset() == 500 + margin // 4
    whole = torch.empty(0).set_(x.untyped_storage())
    assert whole.numel() * 4 == margin + 2000 * 4 + margin  # the recorded storage size, with both margins
    assert torch.equal(whole[x.storage_offset() + 1000 : x.storage_offset() + 1025], parent[1500:1525])
    assert not whole[x.storage_offset() + 1025 :].any()


def test_stray_stores_never_reach_memory_in_a_fresh_process(tmp_path: Path) -> None:
    """The stock interpreter on the issue's program: 1024 lanes into 1000 elements, three launches, dies."""
    script = tmp_path / "tail.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            import torch
            from tests import oob_kernels as k
            x = torch.arange(1024, dtype=torch.float32)
            ys = [torch.zeros(1000) for _ in range(64)]
            for y in ys:
                k.tail_store[(1,)](x, y, BLOCK=1024)
            print(all(torch.equal(y, x[:1000] * 2.0) for y in ys))
            """
        )
    )
    proc = tilelens_cli("--db", tmp_path / "h.db", "record", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True\n"
    assert "64 launches of 1 kernel, 0 errors, 1,536 out-of-bounds lanes" in proc.stderr
