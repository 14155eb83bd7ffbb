"""The CPU interpreter engine: what TileLens runs inside Triton's interpreter.

Access capture (``access``, ``batchrows``), bounds (``bounds``, ``writelog``), the memory hooks (``memhooks``,
``fastmem``), cheaper front-end paths (``frontend``, ``fastbinary``), compiled-Triton semantics the interpreter
lacks (``semantics``), the running launch's state (``launch_context``, ``thread_state``), grid-batched execution
(``batched``) and the Gluon simulator (``gluon``). Nothing here changes Triton's objects: ``core.patches``
installs these pieces for the length of a launch.
"""
