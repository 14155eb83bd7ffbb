"""TileLens's Alembic migrations, shipped inside the package as ``tilelens._migrations``.

The repository keeps them at the top (``migrations/``, where ``alembic.ini`` points); ``tilelens/_migrations`` is
a symbolic link to this folder, so the same files are the package ``tilelens._migrations`` in a checkout, an
editable install and a built wheel. TileLens finds them through that package
(:func:`tilelens.store.sql.migrations.migrations_dir`), never through a path relative to the checkout.
Nothing here is imported as code: Alembic loads ``env.py`` and ``versions/*.py`` by path.
"""
