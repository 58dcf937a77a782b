"""The schema as it was before migrations existed.

Databases created by ``create_all`` before then are stamped at this revision by
``autotune db upgrade``, then upgraded.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _timestamp() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "autotune_jobs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("workload", sa.String(1024), nullable=False),
        sa.Column("workload_name", sa.String(256), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("study_name", sa.String(256), nullable=True),
        sa.Column("device", sa.JSON(), nullable=True),
        sa.Column("fingerprint", sa.JSON(), nullable=True),
        sa.Column("space", sa.JSON(), nullable=True),
        sa.Column("recommendation", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("worker_id", sa.String(256), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("started_at", _timestamp(), nullable=True),
        sa.Column("finished_at", _timestamp(), nullable=True),
        sa.Column("heartbeat_at", _timestamp(), nullable=True),
    )
    op.create_index("ix_autotune_jobs_status", "autotune_jobs", ["status"])
    op.create_table(
        "autotune_trials",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "job_id",
            sa.Integer(),
            sa.ForeignKey("autotune_jobs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("optuna_number", sa.Integer(), nullable=True),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("config_key", sa.String(1024), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("pruned", sa.Boolean(), nullable=False),
        sa.Column("interrupted", sa.Boolean(), nullable=False),
        sa.Column("within_budget", sa.Boolean(), nullable=True),
        sa.Column("samples_per_s", sa.Float(), nullable=True),
        sa.Column("step_time_median_ms", sa.Float(), nullable=True),
        sa.Column("step_time_p90_ms", sa.Float(), nullable=True),
        sa.Column("data_wait_fraction", sa.Float(), nullable=True),
        sa.Column("peak_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("peak_memory_allocated_bytes", sa.BigInteger(), nullable=True),
        sa.Column("peak_memory_reserved_bytes", sa.BigInteger(), nullable=True),
        sa.Column("peak_host_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("device_utilization", sa.Float(), nullable=True),
        sa.Column("losses_finite", sa.Boolean(), nullable=True),
        sa.Column("steps", sa.Integer(), nullable=True),
        sa.Column("warmup_steps", sa.Integer(), nullable=True),
        sa.Column("window_s", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("signal", sa.String(32), nullable=True),
        sa.Column("fingerprint", sa.JSON(), nullable=True),
        sa.Column("started_at", _timestamp(), nullable=False),
        sa.Column("finished_at", _timestamp(), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
    )
    op.create_index("ix_autotune_trials_job_key", "autotune_trials", ["job_id", "config_key"])


def downgrade() -> None:
    op.drop_table("autotune_trials")
    op.drop_table("autotune_jobs")
