"""Measurements that mean what they say: copy time, epoch restarts, utilisation as a fraction.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_trials") as trials:
        trials.add_column(sa.Column("copy_wait_fraction", sa.Float(), nullable=True))
        trials.add_column(sa.Column("epoch_restart_s", sa.Float(), nullable=True))
        trials.add_column(sa.Column("steps_per_epoch", sa.Integer(), nullable=True))
    # GPU utilisation was stored as NVML's percent; every stored number is now a fraction.
    op.execute(
        "UPDATE autotune_trials SET device_utilization = device_utilization / 100.0 "
        "WHERE device_utilization > 1"
    )


def downgrade() -> None:
    op.execute(
        "UPDATE autotune_trials SET device_utilization = device_utilization * 100.0 "
        "WHERE device_utilization <= 1"
    )
    with op.batch_alter_table("autotune_trials") as trials:
        trials.drop_column("steps_per_epoch")
        trials.drop_column("epoch_restart_s")
        trials.drop_column("copy_wait_fraction")
