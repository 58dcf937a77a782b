"""The scale each trial's prediction was read at: the job's trials before it against the profile.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_trials") as trials:
        trials.add_column(sa.Column("prediction_scale", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("autotune_trials") as trials:
        trials.drop_column("prediction_scale")
