"""Reconciliation runs and their findings.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-05

Decisions 0092 (what is compared, the finding kinds) and 0093 (streaming and resume).

* ``reconciliation_runs``: one run over one connector account's created window, with the
  cursor it resumes from (``phase`` and ``cursor``: the last provider object whose page was
  committed), a lease (``lease_token``, ``locked_until``) so two processes never advance one
  run, and the summary counts (``foreign``: provider objects without our reference).
* ``reconciliation_findings``: one row per discrepancy, unique on (kind, connector account,
  provider object id): a rerun over the same window finds the row and adds none.  A resolved
  finding keeps its resolution (who, why, when) whatever later runs see.
* ``reconciliation_matches``: the payments and refunds of ours a run has seen at the provider
  (so the last phase can find ours the provider does not have without holding a set in
  memory); a finished run deletes its rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def ts(name: str, nullable: bool = True) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def count(name: str) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.Integer, nullable=False, server_default="0")


def upgrade() -> None:
    op.create_table(
        "reconciliation_runs",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("connector_account", sa.String(40), nullable=False),
        sa.Column("provider", sa.String(20), nullable=False),
        ts("window_start", nullable=False),
        ts("window_end", nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("phase", sa.String(20), nullable=False),
        sa.Column("cursor", sa.String(255), nullable=True),
        sa.Column("lease_token", sa.BigInteger, nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        ts("locked_until"),
        count("pages"),
        count("payments_seen"),
        count("refunds_seen"),
        count("matched"),
        count("foreign_objects"),
        count("in_flight"),
        count("findings_new"),
        count("findings_seen"),
        sa.Column("ledger_balanced", sa.Boolean, nullable=True),
        sa.Column("ledger_sums", JSON, nullable=True),
        sa.Column("error", sa.String(1000), nullable=True),
        ts("started_at", nullable=False),
        ts("finished_at"),
        ts("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reconciliation_runs"),
        sa.CheckConstraint(
            "status IN ('running', 'completed', 'failed')",
            name="ck_reconciliation_runs_status_known",
        ),
        sa.CheckConstraint(
            "phase IN ('payments', 'refunds', 'ours', 'done')",
            name="ck_reconciliation_runs_phase_known",
        ),
        sa.CheckConstraint("window_start < window_end", name="ck_reconciliation_runs_window"),
    )
    op.create_index("ix_reconciliation_runs_started_at", "reconciliation_runs", ["started_at"])
    op.create_table(
        "reconciliation_findings",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(30), nullable=False),
        sa.Column("connector_account", sa.String(40), nullable=False),
        sa.Column("provider_object_id", sa.String(255), nullable=False),
        sa.Column("object_type", sa.String(20), nullable=False),
        sa.Column("payment_id", sa.String(40), nullable=True),
        sa.Column("operation_id", sa.String(40), nullable=True),
        sa.Column("ours", JSON, nullable=True),
        sa.Column("theirs", JSON, nullable=True),
        sa.Column("first_run_id", sa.String(40), nullable=False),
        sa.Column("last_run_id", sa.String(40), nullable=False),
        sa.Column("resolution", sa.String(20), nullable=False),
        sa.Column("resolved_reason", sa.String(1000), nullable=True),
        sa.Column("resolved_by", sa.String(40), nullable=True),
        sa.Column("resolved_by_name", sa.String(200), nullable=True),
        ts("resolved_at"),
        ts("created_at", nullable=False),
        ts("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reconciliation_findings"),
        sa.UniqueConstraint(
            "kind",
            "connector_account",
            "provider_object_id",
            name="uq_reconciliation_findings_discrepancy",
        ),
        sa.CheckConstraint(
            "kind IN ('orphan_at_provider', 'missing_at_provider', 'amount_mismatch', "
            "'status_mismatch', 'refund_mismatch')",
            name="ck_reconciliation_findings_kind_known",
        ),
        sa.CheckConstraint(
            "resolution IN ('open', 'resolved')",
            name="ck_reconciliation_findings_resolution_known",
        ),
        sa.CheckConstraint(
            "resolution = 'open' OR (resolved_reason IS NOT NULL AND resolved_by IS NOT NULL)",
            name="ck_reconciliation_findings_resolved_says_why",
        ),
    )
    op.create_index(
        "ix_reconciliation_findings_last_run_id", "reconciliation_findings", ["last_run_id"]
    )
    op.create_index(
        "ix_reconciliation_findings_open",
        "reconciliation_findings",
        ["kind"],
        postgresql_where=sa.text("resolution = 'open'"),
        sqlite_where=sa.text("resolution = 'open'"),
    )
    op.create_table(
        "reconciliation_matches",
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("our_id", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "our_id", name="pk_reconciliation_matches"),
    )


def downgrade() -> None:
    op.drop_table("reconciliation_matches")
    op.drop_index("ix_reconciliation_findings_open", table_name="reconciliation_findings")
    op.drop_index("ix_reconciliation_findings_last_run_id", table_name="reconciliation_findings")
    op.drop_table("reconciliation_findings")
    op.drop_index("ix_reconciliation_runs_started_at", table_name="reconciliation_runs")
    op.drop_table("reconciliation_runs")
