"""The interpreter builder's memory methods as TileLens runs them: every access captured, stray lanes guarded.

:mod:`tilelens.core.patches` installs these in place of Triton's own for the length of one launch (and puts
Triton's back); this module only builds them. ``current_launch`` gives the running launch's context (its
collector, recorded reads and write log), or None outside a TileLens launch, when Triton's method runs as is.

Where Triton's memory functions take bool masks only (``compat.MASKS_MUST_BE_BOOL``, 3.9) an integer mask the
interpreter made itself becomes the bool mask it stands for (nonzero: active, as 3.6 to 3.8 read it and as the
access collector reads every mask) before anything else sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from tilelens.core import compat
from tilelens.core.engine import bounds, fastmem
from tilelens.core.engine.access import ATOMIC_CAS, LOAD, STORE
from tilelens.core.kernel.spans import StorageTable


def access_hooks(
    originals: dict[str, Callable[..., Any]], current_launch: Callable[[], Any]
) -> dict[str, Callable[..., Any]]:
    """Capture every memory access, and keep stray lanes away from memory (see tilelens.core.engine.bounds).

    The guard runs before Triton's own method: stray store/atomic lanes are masked off (``atomic_cas``, which
    has no mask, gets scratch pointers for them), stray load lanes are masked off and read through the
    fault-safe path. During a replay, the lanes that read out-of-bounds memory at record time get the
    recorded bytes (``LaunchContext.reads``) before the kernel sees the result.
    """
    load, store = originals["create_masked_load"], originals["create_masked_store"]
    rmw, cas = originals["create_atomic_rmw"], originals["create_atomic_cas"]
    elem_bytes = compat.element_bytes
    with_data = compat.with_data
    bool_masks = compat.MASKS_MUST_BE_BOOL

    # Only the leading parameters are named: the cache/eviction parameters after them differ between Triton
    # releases (compat.CACHE_POLICY_ARGUMENT: 3.9 folded them into one), and are passed through untouched.
    def create_masked_load(self: Any, ptrs: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
        launch = current_launch()
        if launch is None:
            return load(self, ptrs, mask, *rest, **kw)
        if bool_masks:
            mask = _bool_mask(mask)
        collector = launch.collector
        addrs, active = ptrs.data, mask.data
        eb = elem_bytes(ptrs.get_element_ty())
        storage = collector.spans.storage
        stray = None if storage is None else storage.stray(addrs, active, eb)
        if stray is not None:
            ret = load(self, ptrs, with_data(mask, _without(active, stray)), *rest, **kw)
            ret.data = bounds.read_stray(ret.data, addrs, stray, eb, cast("StorageTable", storage))
        else:
            ret = _load(self, launch, storage, ptrs, mask, rest, kw)
        if launch.reads is not None:
            ret.data = launch.reads.apply(self.grid_idx, collector.next_event(self.grid_idx), ret.data)
        collector.record(LOAD, addrs, active, eb, self.grid_idx, ret.data, stray)
        return ret

    def _load(self: Any, launch: Any, storage: Any, ptrs: Any, mask: Any, rest: Any, kw: Any) -> Any:
        """Triton's load, or the same result from :mod:`tilelens.core.engine.fastmem` (no stray lane here)."""
        if storage is not None and (rest or "other" in kw):
            element = ptrs.get_element_ty()
            other = rest[0] if rest else kw["other"]
            data = fastmem.load(storage, launch.views, ptrs, mask, other, compat.np_dtype(element))
            if data is not None:
                return compat.TensorHandle(data, element)
        return load(self, ptrs, mask, *rest, **kw)

    def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
        launch = current_launch()
        if launch is None:
            return store(self, ptrs, value, mask, *rest, **kw)
        if bool_masks:
            mask = _bool_mask(mask)
        collector = launch.collector
        addrs, active = ptrs.data, mask.data
        eb = elem_bytes(ptrs.get_element_ty())
        storage = collector.spans.storage
        stray = None if storage is None else storage.stray(addrs, active, eb)
        collector.record(STORE, addrs, active, eb, self.grid_idx, None, stray)
        if stray is not None:
            mask = with_data(mask, _without(active, stray))
        if launch.writes is not None:
            launch.writes.note(storage, addrs, mask.data, eb)
        if stray is None and storage is not None:
            element = ptrs.get_element_ty()
            if fastmem.store(storage, launch.views, ptrs, value, mask, compat.np_dtype(element)):
                return None  # what Triton's create_masked_store returns
        return store(self, ptrs, value, mask, *rest, **kw)

    def create_atomic_rmw(  # noqa: N803 (Triton's name)
        self: Any, rmwOp: Any, ptr: Any, val: Any, mask: Any, *rest: Any, **kw: Any
    ) -> Any:
        launch = current_launch()
        if launch is None:
            return rmw(self, rmwOp, ptr, val, mask, *rest, **kw)
        if bool_masks:
            mask = _bool_mask(mask)
        collector = launch.collector
        addrs, active = ptr.data, mask.data
        eb = elem_bytes(ptr.get_element_ty())
        storage = collector.spans.storage
        stray = None if storage is None else storage.stray(addrs, active, eb)
        if launch.writes is not None:
            launch.writes.note(storage, addrs, active if stray is None else _without(active, stray), eb)
        if stray is not None:
            ret = rmw(self, rmwOp, ptr, val, with_data(mask, _without(active, stray)), *rest, **kw)
            ret.data = bounds.zero_lanes(ret.data, stray)
        else:
            ret = rmw(self, rmwOp, ptr, val, mask, *rest, **kw)
        if launch.reads is not None:
            ret.data = launch.reads.apply(self.grid_idx, collector.next_event(self.grid_idx), ret.data)
        op = "atomic_" + str(getattr(rmwOp, "name", rmwOp)).lower()
        collector.record(op, addrs, active, eb, self.grid_idx, ret.data, stray)
        return ret

    def create_atomic_cas(self: Any, ptr: Any, *rest: Any, **kw: Any) -> Any:
        launch = current_launch()
        if launch is None:
            return cas(self, ptr, *rest, **kw)
        collector = launch.collector
        addrs = ptr.data
        eb = elem_bytes(ptr.get_element_ty())
        storage = collector.spans.storage
        stray = None if storage is None else storage.stray(addrs, None, eb)
        if launch.writes is not None:
            launch.writes.note(storage, addrs, None if stray is None else ~stray, eb)
        if stray is not None:
            safe, scratch = bounds.scratch_pointers(addrs, stray, eb)
            ret = cas(self, with_data(ptr, safe), *rest, **kw)
            del scratch  # written by the stray lanes' compare-and-swap, read by nobody
            ret.data = bounds.zero_lanes(ret.data, stray)
        else:
            ret = cas(self, ptr, *rest, **kw)
        if launch.reads is not None:
            ret.data = launch.reads.apply(self.grid_idx, collector.next_event(self.grid_idx), ret.data)
        collector.record(ATOMIC_CAS, addrs, None, eb, self.grid_idx, ret.data, stray)
        return ret

    return {
        "create_masked_load": create_masked_load,
        "create_masked_store": create_masked_store,
        "create_atomic_rmw": create_atomic_rmw,
        "create_atomic_cas": create_atomic_cas,
    }


def _without(active: np.ndarray, stray: np.ndarray) -> np.ndarray:
    """The mask ``active`` with the stray lanes cleared, in the mask's own shape."""
    return cast("np.ndarray", np.broadcast_to(np.asarray(active, dtype=bool), stray.shape) & ~stray)


def _bool_mask(mask: Any) -> Any:
    """``mask`` (a handle, or a bare array) with bool data: integer data becomes ``!= 0``; bool data stays."""
    data = np.asarray(mask if isinstance(mask, np.ndarray) else mask.data)
    if data.dtype == np.bool_:
        return mask
    return compat.with_data(mask, data != 0)
