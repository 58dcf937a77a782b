"""torch.compile's time, measured apart from the steady state.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_trials") as trials:
        trials.add_column(sa.Column("compile_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("autotune_trials") as trials:
        trials.drop_column("compile_s")
