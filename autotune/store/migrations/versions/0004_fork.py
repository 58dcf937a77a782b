"""Trials pruned during warm-up, before their timed window.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_trials") as trials:
        trials.add_column(
            sa.Column(
                "pruned_during_warmup", sa.Boolean(), nullable=False, server_default=sa.false()
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("autotune_trials") as trials:
        trials.drop_column("pruned_during_warmup")
