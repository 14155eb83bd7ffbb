"""Recording through the CPU interpreter: traced kernels (``trace``: ``TritonTrace``, ``GluonTrace``,
``_InterpretedLeaf``), one interpreted launch into a ``LaunchRecord`` (``launch``), and snapshots proportional
to what a launch touches (``touched``).
"""
