"""Persistence: tables, engine, the unit of work, repositories and Alembic migrations."""
