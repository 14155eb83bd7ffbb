"""Analyses over stored launches: what a recorded access trace says about a kernel beyond its counts.

``check`` finds races and hazards between the programs of one launch (:mod:`tilelens.analysis.check`). This
package reads histories only through the store's read side (``tilelens.store.read``, ``tilelens.store.files``)
and never imports capture, replay or the command line: an analysis of a history needs neither torch nor Triton.
"""
