"""The seed's names, where the seed put them: ``tilelens.core.trace`` imports what
``tilelens.core.interpreted.trace`` defines (``TritonTrace``, ``GluonTrace``, ``_InterpretedLeaf``,
``unpack_kernel``), so code and tests written against the seed keep working."""

from tilelens.core.interpreted.trace import GluonTrace, TritonTrace, _InterpretedLeaf, unpack_kernel

__all__ = ["GluonTrace", "TritonTrace", "_InterpretedLeaf", "unpack_kernel"]
