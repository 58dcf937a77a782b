"""The REST API of the tuning service: ``create_app(settings)`` builds the FastAPI app."""

from .main import create_app
from .settings import Settings, load_settings

__all__ = ["Settings", "create_app", "load_settings"]
