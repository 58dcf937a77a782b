"""One APIRouter per resource, mounted under /v1 by :func:`autotune_api.main.create_app`."""
