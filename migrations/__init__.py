"""Alembic migrations for Tollgate's database, shipped in the wheel.

Revisions live in `migrations/versions/` as one linear chain named `NNNN_short_name`
(revision id = file stem, at most 32 characters). To add one on top of the head:
`alembic -c migrations/alembic.ini revision -m "what" --rev-id 0002_what`, with
`TOLLGATE_DATABASE_URL` pointing at a scratch database. Apply with `tollgate db upgrade`.
Declare the new tables' models on `gateway.store.models.Base` in your own module and list it
in `gateway.store.migrate.MODEL_MODULES`: autogenerate and the schema test then see them.
"""
