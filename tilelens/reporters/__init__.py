"""What a history holds, drawn: heatmap images (PNG through matplotlib, SVG written directly) and HTML.

Renderers take the plain data of :mod:`tilelens.store.read` and decide only geometry, colour and markup;
``html`` holds the HTML pieces ``tilelens serve`` and ``tilelens report`` share, and ``report`` alone reads a
history (through the read-only query API) to write a run as static files. matplotlib is imported by the PNG
renderer alone, when it runs.
"""
