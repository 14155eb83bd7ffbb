"""``tilelens serve``: a local, read-only web app over a history (starlette on uvicorn).

``app`` builds the ASGI application and its routes (a face over :mod:`tilelens.api`, as the commands are);
``pages`` writes the HTML, escaping every value that comes from a history; ``static/heatmap.js`` draws the
heatmaps on canvases from the JSON endpoint and says what is under the pointer. Nothing here loads from
outside the machine: no CDN, no web fonts.
"""
