"""Measurement sets (a job resumed on other hardware starts a new one) and live workers.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("autotune_jobs", "autotune_trials"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("measurement_set", sa.Integer(), nullable=False, server_default="1")
            )
    op.create_table(
        "autotune_workers",
        sa.Column("id", sa.String(256), primary_key=True),
        sa.Column("device_class", sa.String(512), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_autotune_workers_device_class", "autotune_workers", ["device_class"])


def downgrade() -> None:
    op.drop_index("ix_autotune_workers_device_class", "autotune_workers")
    op.drop_table("autotune_workers")
    for table in ("autotune_trials", "autotune_jobs"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("measurement_set")
