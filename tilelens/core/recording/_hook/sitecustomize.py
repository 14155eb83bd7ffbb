"""Start-up hook for child processes where ``tilelens_startup.pth`` is not installed.

``tilelens record`` puts this folder first on its children's ``PYTHONPATH`` only then (see
:mod:`tilelens.core.recording.children`). Python imports the first ``sitecustomize`` on ``sys.path``, so this one
imports the next one (the environment's own, if any) before calling the hook, which does nothing unless the
``TILELENS_FOLLOW`` variable is set.
"""

import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_saved = list(sys.path)
try:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    _mine = sys.modules.pop("sitecustomize", None)
    try:
        if importlib.util.find_spec("sitecustomize") is not None:
            importlib.import_module("sitecustomize")
    except Exception as exc:  # python itself reports a failing sitecustomize and goes on
        print(
            f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
    if _mine is not None:
        sys.modules["sitecustomize"] = _mine
finally:
    sys.path[:] = _saved

if os.environ.get("TILELENS_FOLLOW"):
    try:
        from tilelens.core.recording.child import start
    except ImportError:
        pass
    else:
        start()
