"""The session a user enters: ``Recording`` (``tilelens.record()``), child processes that record into the same
history (``children``) and their start-up hook (``_hook``).
"""
