"""Alembic migrations of autotune's own tables (Optuna's tables are Optuna's business)."""
