"""Recording compiled launches on a GPU: the router (``router``, ``tuning``, ``frames``, ``routed``), what the
launching thread keeps (``capture``, ``templates``, ``rows``), tensor snapshots (``snapshots``, ``pinned_pool``)
and the writers that store launches off the program's path (``sink``, ``writer``).
"""
