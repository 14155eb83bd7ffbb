"""mbarriers: the phase state machine of NVIDIA's ``mbarrier`` objects, with every async operation complete.

The simulator performs asynchronous copies (TMA, ``cp.async``) and MMAs at the moment they are issued, so a
barrier only has to count: ``init(count)`` starts phase 0 expecting ``count`` arrivals; ``arrive`` takes
arrivals away, ``expect(bytes)`` is an arrive that also expects ``bytes`` of transactions (what
``mbarrier.arrive.expect_tx`` does), and every completed TMA copy takes its bytes away. When no arrival and no
byte is outstanding the phase completes and the next one starts with ``count`` arrivals again.
``wait(phase)`` returns once the phase with that parity has completed (at init, waiting on parity 1 returns at
once, as on the GPU). A wait that can never return is the kernel's deadlock: with a single partition it is
reported at once, under ``warp_specialize`` when every partition waits (see ``partitions.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


class BarrierError(RuntimeError):
    """A misuse of an mbarrier that would hang or misbehave on the GPU."""


@dataclass
class Barrier:
    count: int
    pending: int
    tx_bytes: int = 0
    phase: int = 0  # index of the phase in progress; phases before it have completed

    def arrive(self, count: int = 1) -> None:
        self.pending -= count
        self._maybe_complete()

    def expect(self, nbytes: int) -> None:
        """``mbarrier.arrive.expect_tx``: one arrival, and ``nbytes`` of transactions to wait for."""
        self.tx_bytes += nbytes
        self.arrive(1)

    def complete_tx(self, nbytes: int) -> None:
        self.tx_bytes -= nbytes
        self._maybe_complete()

    def completed(self, parity: int) -> bool:
        """Whether the phase of this parity has completed (the in-progress phase has the other parity)."""
        return self.phase % 2 != parity % 2

    def _maybe_complete(self) -> None:
        if self.pending <= 0 and self.tx_bytes == 0:
            self.phase += 1
            self.pending = self.count
