"""Grid-batched interpretation: the programs of one launch run together, one numpy operation for all of them.

Triton's interpreter runs a launch one program after another (``GridExecutor.__call__``). The batched engine
runs the kernel's Python once for the whole grid instead: a value that differs between programs carries the
programs as a leading axis (:class:`~tilelens.core.engine.batched.state.BatchedHandle`, data shape
``(B, *per_program_shape)``), a value that does not stays as the stock interpreter holds it. Results and
access traces are bit-identical to the per-program run, or the engine gives up (``Fallback``), memory is put
back (:mod:`tilelens.core.engine.writelog`) and the launch runs program by program as before.

* :mod:`.state` — the handle type, the per-launch batch state, the one switch (``TILELENS_ENGINE``);
* :mod:`.builder` — the interpreter builder's methods for batched operands;
* :mod:`.ops` — reductions, scans and the tensor's ``__bool__``/``__index__`` (Python control flow);
* :mod:`.depend` — the check that no program saw what another program of the launch wrote;
* :mod:`.executor` — one launch: the batched attempt, and the fallback.

Nothing here changes Triton's objects: :mod:`tilelens.core.patches` installs all of it.
"""
