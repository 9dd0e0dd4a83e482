"""API keys in a table of their own: several per client, each revoked on its own.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05

Decision 0079.  Every client's one key moves over unchanged (the same hash, prefix, creation
and revocation), so every key in use keeps working.  A moved key's id is derived from its
hash (``key_`` + 24 hex characters of it: a SHA-256 of 256 random bits, so nothing about the
key can be recovered from it); keys made later get random ids.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def ts(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("client_id", sa.String(40), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("key_prefix", sa.String(24), nullable=False),
        ts("created_at"),
        ts("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
        sa.ForeignKeyConstraint(
            ["client_id"], ["api_clients.id"], name="fk_api_keys_client_id_api_clients"
        ),
    )
    op.create_index("ix_api_keys_client_id", "api_keys", ["client_id"])
    op.execute(
        "INSERT INTO api_keys (id, client_id, key_hash, key_prefix, created_at, revoked_at) "
        "SELECT 'key_' || substr(key_hash, 1, 24), id, key_hash, key_prefix, created_at, "
        "revoked_at FROM api_clients"
    )
    with op.batch_alter_table("api_clients") as batch:
        batch.drop_constraint("uq_api_clients_key_hash", type_="unique")
        batch.drop_column("key_hash")
        batch.drop_column("key_prefix")


def downgrade() -> None:
    # Back to one key per client: each client keeps its oldest active key (else its oldest).
    with op.batch_alter_table("api_clients") as batch:
        batch.add_column(sa.Column("key_hash", sa.String(64), nullable=True))
        batch.add_column(sa.Column("key_prefix", sa.String(24), nullable=True))
    op.execute(
        "UPDATE api_clients SET key_hash = (SELECT k.key_hash FROM api_keys k "
        "WHERE k.client_id = api_clients.id ORDER BY k.revoked_at IS NOT NULL, k.created_at "
        "LIMIT 1), key_prefix = (SELECT k.key_prefix FROM api_keys k "
        "WHERE k.client_id = api_clients.id ORDER BY k.revoked_at IS NOT NULL, k.created_at "
        "LIMIT 1)"
    )
    with op.batch_alter_table("api_clients") as batch:
        batch.alter_column("key_hash", nullable=False)
        batch.alter_column("key_prefix", nullable=False)
        batch.create_unique_constraint("uq_api_clients_key_hash", ["key_hash"])
    op.drop_index("ix_api_keys_client_id", table_name="api_keys")
    op.drop_table("api_keys")
