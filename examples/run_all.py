"""Runs every example once: `tilelens record examples/run_all.py` records them all in one run."""

import autotuned_matmul
import heuristics_scale
import oob_bug
import softmax
import vector_add

for example in (vector_add, softmax, autotuned_matmul, heuristics_scale, oob_bug):
    example.main()
