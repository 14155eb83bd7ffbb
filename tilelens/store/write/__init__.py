"""Writing a history: ``History`` (runs, launches, replays, autotune events), its batch writes and derived
traces, and the row builders of templated launches.
"""
