"""Fleets: the device class a job needs, and one trial per (job, number).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_jobs") as jobs:
        jobs.add_column(sa.Column("device_class", sa.String(512), nullable=True))
    op.create_index("ix_autotune_jobs_device_class", "autotune_jobs", ["device_class"])
    # Two writers that both read max(number) must not both store the same number.
    op.create_index(
        "uq_autotune_trials_job_number", "autotune_trials", ["job_id", "number"], unique=True
    )


def downgrade() -> None:
    op.drop_index("uq_autotune_trials_job_number", "autotune_trials")
    op.drop_index("ix_autotune_jobs_device_class", "autotune_jobs")
    with op.batch_alter_table("autotune_jobs") as jobs:
        jobs.drop_column("device_class")
