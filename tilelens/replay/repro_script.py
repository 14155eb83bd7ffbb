"""Reproduce one recorded Triton launch: rebuild its arguments, launch its kernel, compare with the record.

Written by ``tilelens repro`` as ``repro.py`` beside ``repro.json`` (what the launch was) and ``.npy`` files
(its argument storages before the launch and, for each argument the launch wrote, what it held after). Needs
only torch, Triton and numpy: TileLens is not imported, and every file here is plain data (numpy's
``np.load`` refuses arrays of Python objects by default).

    python repro.py                  # on the CPU, in Triton's interpreter: the record, bit for bit
    python repro.py --device cuda    # compiled on a GPU: within dtype tolerances
    python repro.py --json           # the outcome as one JSON object (``tilelens replay --python`` reads it)

The kernel is imported from its module when that module is importable and still holds the recorded source
(an installed package, such as Liger's kernels); otherwise it is rebuilt from the bundle in ``repro.json``
(the sources of the kernel and the jit functions it calls, and the module-level values they read, as they
were when the launch was recorded). An autotuned or heuristic kernel launches with the recorded config: the
innermost kernel runs with the recorded meta-parameters and launch options, nothing is tuned again.
Exit status: 0 match, 1 mismatch, 2 the launch could not be reproduced here.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import linecache
import os
import platform
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class CannotReproduce(Exception):
    """The launch cannot be reproduced here; the message says why."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (Triton's interpreter, default) or cuda[:N]")
    parser.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    args = parser.parse_args(argv)
    manifest = json.loads((HERE / "repro.json").read_text())
    device = args.device
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: kernels decorate interpreted
    result: dict[str, Any] = {"launch": manifest["launch"], "kernel": manifest["kernel"]["name"]}
    try:
        import torch
        import triton

        if device == "cpu":
            mend_interpreter_index()

        result["recorded"] = manifest["recorded"]
        result["replayed"] = {
            "triton": triton.__version__,
            "torch": torch.__version__,
            "numpy": _numpy_version(),
            "python": platform.python_version(),
            "device": device,
        }
        if device != "cpu" and not torch.cuda.is_available():
            raise CannotReproduce(f"{device} requested but no CUDA device is available here")
        kernel, origin = load_kernel(manifest)
        result["kernel_from"] = origin
        tensors, kwargs = build_arguments(manifest, torch.device(device))
        grid = tuple(manifest["grid"])
        result["launched"] = True
        kernel[grid](**kwargs)
        if device != "cpu":
            torch.cuda.synchronize()
        result.update(compare(manifest, tensors, exact=device == "cpu"))
    except CannotReproduce as exc:
        result.update(outcome="error", message=str(exc))
    except Exception as exc:  # the launch itself failed: the record says it succeeded
        if manifest.get("status", "ok") == "ok":
            result.update(outcome="mismatch", message=f"the launch raised {type(exc).__name__}: {exc}")
        else:
            result.update(
                outcome="match", message=f"the launch failed, as recorded: {type(exc).__name__}: {exc}"
            )
    report(result, as_json=args.json)
    return {"match": 0, "mismatch": 1}.get(result["outcome"], 2)


def mend_interpreter_index() -> None:
    """Triton 3.6's interpreter reads a scalar's ``__index__`` as ``int()`` of a (1,) array, which numpy 2.4
    refuses (``range(tl.cdiv(K, BLOCK))`` fails); 3.7 squeezes first. Every version gets the 3.7 behaviour,
    set through the interpreter's own scope so it is undone with the launch."""
    from triton.runtime import interpreter

    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is None:
        return

    def _patch_lang_tensor(tensor: Any, scope: Any) -> None:
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    interpreter._patch_lang_tensor = _patch_lang_tensor


def _numpy_version() -> str:
    import numpy

    return str(numpy.__version__)


# -- the kernel ------------------------------------------------------------------------------------------------


def load_kernel(manifest: dict[str, Any]) -> tuple[Any, str]:
    """The innermost kernel to launch, and where it came from ("module" or "bundle")."""
    spec = manifest["kernel"]
    if spec["module"] != "__main__":
        try:
            module = importlib.import_module(spec["module"])
            obj: Any = module
            for part in spec["qualname"].split("."):
                obj = getattr(obj, part)
            jit = innermost(obj)
            if source_sha256(jit) == spec["source_sha256"]:
                return jit, "module"
        except (ImportError, AttributeError, CannotReproduce):
            pass
    bundle = manifest.get("bundle")
    if not bundle:
        raise CannotReproduce(
            f"kernel {spec['name']} is not importable with its recorded source here, and the record keeps no "
            "bundle of it (recorded before TileLens kept bundles)"
        )
    return kernel_from_bundle(bundle), "bundle"


def innermost(obj: Any) -> Any:
    """The JITFunction under any Autotuner / Heuristics layers."""
    from triton.runtime.jit import JITFunction

    interpreted = _interpreted_class()
    for _ in range(64):
        if isinstance(obj, JITFunction) or (interpreted is not None and isinstance(obj, interpreted)):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            break
    raise CannotReproduce("the object at the kernel's name is not a Triton kernel")


def _interpreted_class() -> Any:
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return None
    return InterpretedFunction


def source_sha256(jit: Any) -> str:
    src = getattr(jit, "src", None) or getattr(jit, "_src", None)
    if src is None:  # an interpreted kernel: the JIT function it wraps
        src = getattr(getattr(jit, "fn", None), "src", "") or ""
    return hashlib.sha256(str(src).encode("utf-8")).hexdigest()


def kernel_from_bundle(bundle: dict[str, Any]) -> Any:
    """Define every unit of the bundle (dependencies first), each in a namespace of its own, and return the
    entry kernel. Triton reads a kernel's source through ``inspect`` (``linecache``): the units of one recorded
    file are registered as one text under one name, each at its recorded line, so every unit is found there."""
    import triton
    import triton.language as tl

    filenames = _register_sources(bundle["units"])
    made: dict[str, Any] = {}
    for unit in bundle["units"]:
        # Triton's interpreter wants triton.language among a kernel's globals, used or not (its module had it).
        namespace: dict[str, Any] = {
            "__name__": f"tilelens_bundle_{unit['module'].replace('.', '_')}",
            "__tl": tl,
        }
        for name, module in unit["imports"].items():
            namespace[name] = importlib.import_module(module)
        for name, value in unit["values"].items():
            namespace[name] = plain_value(value)
        for name, key in unit["functions"].items():
            namespace[name] = made[key]
        text = "\n" * max(int(unit["line"]) - 1, 0) + unit["source"]
        exec(
            compile(text, filenames[unit["key"]], "exec"), namespace
        )  # the recorded source the user chose to run
        fn = namespace[unit["name"]]
        if unit["decorator"] == "gluon.jit":
            from triton.experimental import gluon

            made[unit["key"]] = gluon.jit(fn)
        else:
            made[unit["key"]] = triton.jit(fn)
    return made[bundle["entry"]]


def _register_sources(units: list[dict[str, Any]]) -> dict[str, str]:
    """Per unit, the file name its code is compiled under, registered with ``linecache``: one text per recorded
    file with its units at their lines; a unit that would overlap another gets a name of its own."""
    texts: dict[str, list[str]] = {}
    out: dict[str, str] = {}
    for unit in units:
        lines = unit["source"].splitlines(True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        start = max(int(unit["line"]) - 1, 0)
        name = f"{unit['file']}@tilelens-bundle"
        text = texts.setdefault(name, [])
        if any(line.strip() for line in text[start : start + len(lines)]):
            name = f"{unit['file']}@tilelens-bundle-{unit['name']}"
            text = texts.setdefault(name, [])
        text.extend("\n" for _ in range(start + len(lines) - len(text)))
        text[start : start + len(lines)] = lines
        out[unit["key"]] = name
    for name, text in texts.items():
        linecache.cache[name] = (sum(map(len, text)), None, text, name)
    return out


def plain_value(value: dict[str, Any]) -> Any:
    kind = value["kind"]
    if kind == "constexpr":
        import triton.language as tl

        return tl.constexpr(plain_value(value["value"]))
    if kind == "dtype":
        import triton.language as tl

        return tl.dtype(value["value"])
    if kind == "float":
        return float(value["value"])
    return value["value"]


# -- the arguments ---------------------------------------------------------------------------------------------


def build_arguments(manifest: dict[str, Any], device: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every argument by name (tensors as views of rebuilt storages, views of one storage sharing it), and the
    tensors by name; constexprs and launch options join the keyword arguments."""
    import numpy as np
    import torch

    storages = []
    for s in manifest["storages"]:
        raw = np.load(HERE / s["file"])
        storages.append(torch.from_numpy(raw.copy()).to(device))
    kwargs: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    for a in manifest["args"]:
        if a["kind"] == "tensor":
            dtype = getattr(torch, a["dtype"])
            base = storages[a["storage"]].view(dtype)
            view = torch.as_strided(base, a["shape"], a["strides"], a["offset"])
            kwargs[a["name"]] = tensors[a["name"]] = view
        elif a["kind"] == "none":
            kwargs[a["name"]] = None
        else:
            kwargs[a["name"]] = typed(a["value"], a.get("type"))
    for name, value in manifest["constexprs"].items():
        kwargs[name] = typed(value, None)
    kwargs.update({name: typed(value, None) for name, value in manifest["options"].items()})
    return tensors, kwargs


def typed(value: Any, kind: str | None) -> Any:
    if isinstance(value, dict) and set(value) == {"tl_dtype"}:
        import triton.language as tl

        return tl.dtype(value["tl_dtype"])
    if isinstance(value, list):
        return tuple(typed(v, None) for v in value)
    if kind == "float" and isinstance(value, (int, float)):
        return float(value)
    if kind == "int" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "bool":
        return bool(value)
    return value


# -- the comparison --------------------------------------------------------------------------------------------


def compare(manifest: dict[str, Any], tensors: dict[str, Any], exact: bool) -> dict[str, Any]:
    """Each written argument's span against the recorded one: bit for bit (``exact``), else floats within the
    argument's tolerance. The outcome, and for a mismatch the first differing element and the largest errors."""
    import numpy as np
    import torch

    for e in manifest["expected"]:
        view = tensors[e["name"]]
        replayed = torch.as_strided(view, (e["elements"],), (1,), view.storage_offset()).detach().cpu()
        recorded = torch.from_numpy(np.load(HERE / e["file"]).copy()).view(view.dtype)
        if e.get("known"):  # a sparse record: only the elements the recorded launch touched are known
            known = torch.from_numpy(np.load(HERE / e["known"]))
            replayed, recorded = replayed[known], recorded[known]
        n = replayed.numel()
        byte_differs = (
            replayed.view(torch.uint8).reshape(n, -1) != recorded.view(torch.uint8).reshape(n, -1)
        ).any(1)
        if not bool(byte_differs.any()):
            continue
        floating = view.dtype.is_floating_point or view.dtype.is_complex
        wide = torch.complex128 if view.dtype.is_complex else torch.float64
        a, b = recorded.to(wide), replayed.to(wide)
        both_nan = (a.isnan() & b.isnan()) if floating else torch.zeros(n, dtype=torch.bool)
        err = torch.where(both_nan, torch.zeros(n, dtype=torch.float64), (a - b).abs().to(torch.float64))
        scale = a.abs().to(torch.float64)
        if exact or not floating:
            bad = byte_differs
        else:
            bad = ~(err <= e["tolerance"]["atol"] + e["tolerance"]["rtol"] * scale) & ~both_nan
        if not bool(bad.any()):
            continue
        first = int(bad.nonzero()[0, 0])
        max_abs = float(err.nan_to_num(float("inf")).max())
        rel = torch.where(err == 0, torch.zeros_like(err), err / scale)
        max_rel = float(rel.nan_to_num(float("inf")).max())
        return {
            "outcome": "mismatch",
            "message": (
                f"{e['name']}: element {first} of its span differs (recorded {recorded[first].item()!r}, replayed "
                f"{replayed[first].item()!r}); {int(bad.sum())} of {n} elements differ; max abs err {max_abs:.6g}, "
                f"max rel err {max_rel:.6g}"
            ),
            "first": {"arg": e["name"], "element": first},
            "max_abs_err": max_abs,
            "max_rel_err": max_rel,
        }
    how = "bit for bit" if exact else "within tolerance"
    return {
        "outcome": "match",
        "message": f"{len(manifest['expected'])} written tensor(s) as recorded, {how}",
    }


def report(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, default=str))
        return
    rec, rep = result.get("recorded"), result.get("replayed")
    if rec and rep:
        print(
            f"recorded with Triton {rec.get('triton')} (torch {rec.get('torch')}) on {rec.get('device')}; "
            f"replayed with Triton {rep['triton']} (torch {rep['torch']}) on {rep['device']}"
        )
    print(f"{result['outcome']}: launch {result['launch']} ({result['kernel']}): {result.get('message', '')}")


if __name__ == "__main__":
    sys.exit(main())
