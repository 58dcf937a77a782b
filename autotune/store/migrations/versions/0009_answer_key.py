"""The question a job answers, as a key: a new job with a succeeded job's key is answered by it.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_jobs") as jobs:
        jobs.add_column(sa.Column("answer_key", sa.String(length=64), nullable=True))
    op.create_index("ix_autotune_jobs_answer_key", "autotune_jobs", ["answer_key"])


def downgrade() -> None:
    op.drop_index("ix_autotune_jobs_answer_key", "autotune_jobs")
    with op.batch_alter_table("autotune_jobs") as jobs:
        jobs.drop_column("answer_key")
