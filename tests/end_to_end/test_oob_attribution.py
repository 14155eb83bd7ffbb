"""An out-of-bounds event belongs to the argument its lanes addressed, wherever the allocator put the others.

The kernel loads ``x_ptr + offs - 8`` for 128 lanes unmasked: 8 lanes before ``x`` (100 elements), its 100
elements, 20 past its end; then stores 100 of them to ``out``. Placement is fixed by cutting every tensor out
of one storage ``base`` (800 float32), so the memory around ``x`` is known exactly:

* ``apart``: ``out = base[0:100]``, ``x = base[100:][500:600]`` = ``base[600:700]``. The stray-free lanes
  before ``x`` lie in ``base`` between the two views. ``out`` is the nearest argument below the first lane,
  which is what the load used to be attributed to (offsets 592..711 of a 100-element ``out``).
* ``adjacent``: ``out = base[0:100]``, ``x = base[100:200]``: the 8 lanes before ``x`` are ``out[92:100]``, a
  cross-tensor read. They are out of bounds of ``x`` (offsets -8..-1) and the launch names ``out`` as hit.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import torch

from tests import oob_kernels as k
from tests.end_to_end.conftest import tilelens, tilelens_in_process
from tilelens.core.engine.bounds import describe_first_oob
from tilelens.core.interpreted.trace import TritonTrace
from tilelens.core.kernel.spans import ArgSpan, SpanTable
from tilelens.store.files.traces import lane_offsets, lane_oob

SCRIPT = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def shifted_copy(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs - 8)  # BUG: starts 8 elements before x and runs 20 past its end
        tl.store(out_ptr + offs, v, mask=offs < 100)


    for gap in (500, 0):  # launch 1: x far above out in base; launch 2: x right after out
        base = torch.arange(800, dtype=torch.float32)
        out, buf = base[:100], base[100:]
        x = buf[gap : gap + 100]
        shifted_copy[(1,)](x, out, BLOCK=128)
        assert torch.equal(out, torch.arange(92.0, 192.0) + gap), out
    """
)


def _show(db: Path, blobs: Path, launch_id: int) -> dict:
    res = tilelens_in_process("--db", db, "--blobs", blobs, "show", launch_id, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_out_of_bounds_load_is_attributed_to_the_tensor_it_addressed(tmp_path: Path) -> None:
    script = tmp_path / "shifted.py"
    script.write_text(SCRIPT)
    db, blobs = tmp_path / "h.db", tmp_path / "blobs"
    proc = tilelens("--db", db, "--blobs", blobs, "record", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for launch_id, cross in ((1, None), (2, [[0, 1, 8]])):
        d = _show(db, blobs, launch_id)
        x, out, _block = d["args"]
        assert (x["name"], out["name"]) == ("x_ptr", "out_ptr")
        # x: 128 lanes loaded, 8 before it and 20 past its end out of bounds, its 100 elements touched.
        assert (x["access"]["load_lanes"], x["access"]["oob_lanes"], x["access"]["distinct_elements"]) == (
            128,
            28,
            100,
        )
        # out: only the 100 masked-in store lanes, all in bounds; no load is charged to it.
        assert (out["access"]["load_lanes"], out["access"]["store_lanes"]) == (0, 100)
        assert (out["access"]["oob_lanes"], out["access"]["distinct_elements"]) == (0, 100)
        (event,) = d["oob_events"]
        assert (event["op"], event["arg"], event["arg_name"]) == ("load", 0, "x_ptr")
        assert (event["active"], event["oob_lanes"], event["stray_lanes"]) == (128, 28, 0)
        assert event["offsets"] == [-8, 119]
        assert d["config"].get("cross_args") == cross
        text = tilelens_in_process("--db", db, "--blobs", blobs, "show", launch_id).stdout
        assert "28 lanes out of bounds (28 loaded, 0 stored)" in text
        figures = text.replace(str(tmp_path), "")  # the script's path may hold any number (pytest-192/...)
        assert figures.count("100 of 100") == 2 and "192" not in figures
        assert ("8 out-of-bounds lanes of x_ptr's accesses hit out_ptr's elements" in text) == bool(cross)
        assert "element offsets -8..119 (x_ptr has 100 elements)" in text


def _table(*spans: ArgSpan) -> SpanTable:
    return SpanTable(list(spans))


def test_attribution_follows_the_view_holding_most_active_lanes() -> None:
    out = ArgSpan(1, 1000, 1400, 4, 1000, 4200)
    x = ArgSpan(0, 1400, 1800, 4, 1000, 4200)
    addrs = (np.arange(128, dtype=np.uint64) - np.uint64(8)) * np.uint64(4) + np.uint64(1400)
    span, outside, hits = _table(out, x).attribute(addrs, None)
    assert span is x and hits == {1: 8}
    np.testing.assert_array_equal(np.flatnonzero(outside), np.r_[0:8, 108:128])
    # Masked lanes count for nothing: with only the 8 lanes inside out active, the event is out's.
    mask = np.zeros(128, dtype=bool)
    mask[:8] = True
    span, outside, hits = _table(out, x).attribute(addrs, mask)
    assert span is out and not outside.any() and hits == {}


def test_attribution_ties_go_to_the_lower_position_and_lanes_in_no_view_to_their_storage() -> None:
    a = ArgSpan(1, 1000, 1016, 4, 1000, 1016)
    b = ArgSpan(0, 1016, 1032, 4, 1016, 2000)
    addrs = np.arange(1008, 1024, 4, dtype=np.uint64)  # 2 lanes in a, 2 in b
    span, outside, hits = _table(a, b).attribute(addrs, None)
    assert span is b and hits == {1: 2} and outside.tolist() == [True, True, False, False]
    # Nothing in any view, but inside b's storage above its view: b's, though a is the nearest view below.
    span, outside, hits = _table(a, b).attribute(np.array([1500, 1504], dtype=np.uint64), None)
    assert span is b and outside.all() and hits == {}


def test_cross_tensor_lanes_are_out_of_bounds_of_their_own_argument_and_name_the_hit_one() -> None:
    base = torch.arange(800, dtype=torch.float32)
    out, x = base[:100], base[100:200]  # x starts right where out ends
    traced = TritonTrace(k.shifted_copy, in_place=False)
    traced[(1,)](x, out, BLOCK=128)
    assert torch.equal(out, torch.arange(92.0, 192.0))  # computed as untraced: the 8 lanes read out[92:100]
    rec = traced.records[-1]
    load = rec.trace.slice(0, 1).to_pylist()[0]
    assert (load["op"], load["arg"], load["active"], load["oob"], load["stray"]) == ("load", 0, 128, 28, 0)
    oob = lane_offsets(load)[lane_oob(load)]
    np.testing.assert_array_equal(oob, np.r_[-8:0, 100:120])
    assert rec.config["cross_args"] == [[0, 1, 8]]
    assert (rec.summary.oob_load_lanes, rec.summary.oob_store_lanes, rec.summary.dropped_lanes) == (28, 0, 0)
    message = describe_first_oob(rec, 3)
    assert "load out of bounds at line" in message
    assert "argument x_ptr (100 elements): 28 of 128 active lanes outside, element offsets -8..119" in message
    assert "8 lanes of x_ptr's accesses hit out_ptr's elements; recorded as launch 3" in message
