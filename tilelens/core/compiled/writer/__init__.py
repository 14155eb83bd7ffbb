"""Where a compiled recording's launches are written: a background thread (``thread``), or a process of its
own (``process``, the parent half; ``child``, the process itself).
"""
