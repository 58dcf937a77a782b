"""Who submitted a job: the name of the API token, so that only it (or an admin) cancels it.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_jobs") as jobs:
        jobs.add_column(sa.Column("submitted_by", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("autotune_jobs") as jobs:
        jobs.drop_column("submitted_by")
