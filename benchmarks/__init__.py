"""The TileLens benchmark suite: workloads (kernels.py, workloads.py) and the runner behind scripts/bench.py."""
