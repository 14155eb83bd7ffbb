"""What a launch is, independent of how it runs: its parameters and arguments, host descriptors and Gluon
layouts as recorded values, the spans of argument memory, the kernel's identity, and how a failure is described.

Replay uses these too. Imports only ``compat`` and the ground floor (``records``, ``errors``).
"""
