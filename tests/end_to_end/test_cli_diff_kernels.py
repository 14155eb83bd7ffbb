"""``tilelens diff`` of launches of two different kernels: said first, then arguments compared by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from tests import store_helpers
from tests.end_to_end.conftest import tilelens_in_process
from tilelens.store import History


def test_two_kernels_are_said_first_and_compared_by_name(tmp_path: Path) -> None:
    x = torch.arange(16, dtype=torch.float32)
    add = store_helpers.launch(x, out_after=x + 1, seq=0)
    # mul_kernel(out_ptr, x_ptr, n, BLOCK): the same tensors in the other order, out written otherwise
    mul = store_helpers.launch(x, out_after=x * 2, k=store_helpers.kernel("mul_kernel"), seq=1)
    first, second, *rest = mul.args
    mul.args = [dataclasses.replace(second, position=0), dataclasses.replace(first, position=1), *rest]
    with History.open(str(tmp_path / "h.db"), tmp_path / "blobs") as h:
        run = h.begin_run(store_helpers.run_info())
        h.write_launch(run, add)
        h.write_launch(run, mul)
    where = ["--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs"]

    out = tilelens_in_process(*where, "diff", "1", "2")
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "launches 1 and 2: different kernels: tests.kernels.add_kernel and tests.kernels.mul_kernel; "
        "arguments compared by name"
    )
    # by name, x_ptr and out_ptr match whatever their positions: only out_ptr's written elements differ
    assert not any(line.strip().startswith(("argument", "launch ")) for line in lines[1:]), out.stdout
    outputs = [line.split(None, 1)[1] for line in lines if line.strip().startswith("output")]
    assert len(outputs) == 1 and outputs[0].startswith("out_ptr: 15 of 16 elements differ"), outputs

    data = json.loads(tilelens_in_process(*where, "diff", "1", "2", "--json").stdout)
    assert (data["same"], data["same_kernel"], data["args"]) == (False, False, [])
    assert [o["name"] for o in data["outputs"]] == ["out_ptr"]
    same = json.loads(tilelens_in_process(*where, "diff", "1", "1", "--json").stdout)
    assert (same["same"], same["same_kernel"]) == (True, True)
