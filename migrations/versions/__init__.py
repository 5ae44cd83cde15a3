"""Alembic revision files (a package only so that setuptools ships them in the wheel)."""
