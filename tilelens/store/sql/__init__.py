"""The store's SQL tier: database URLs, models, the migrations runner, engines and dialect SQL, read-only
connections (SQLite, the libpq reader for PostgreSQL), name matching and run liveness.
"""
