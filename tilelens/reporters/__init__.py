"""Pictures of what a history holds: heatmap images (PNG through matplotlib, SVG written directly).

Renderers take the plain data of :mod:`tilelens.store.heatmaps` and decide only geometry and colour; nothing
here reads a history. matplotlib is imported by the PNG renderer alone, when it runs.
"""
