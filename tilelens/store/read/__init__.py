"""Reading a history: the queries behind ``ls``, ``show``, ``sql``, ``export``, ``diff`` and heatmaps, trace SQL,
and the launches a replay reads. Never imports ``store.write``.
"""
