"""One APIRouter per resource, mounted under /v1 by :func:`api.main.create_app`."""
