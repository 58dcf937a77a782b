"""Profile-guided search: the job's profile, and each trial's predicted samples/s.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_jobs") as jobs:
        jobs.add_column(sa.Column("profile", sa.JSON(), nullable=True))
    with op.batch_alter_table("autotune_trials") as trials:
        trials.add_column(sa.Column("predicted_samples_per_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("autotune_trials") as trials:
        trials.drop_column("predicted_samples_per_s")
    with op.batch_alter_table("autotune_jobs") as jobs:
        jobs.drop_column("profile")
