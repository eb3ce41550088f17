"""The browser page served at ``/``: talk to the deployment from a web page."""

from .static_routes import STATIC_DIR, mount_web_page

__all__ = ["STATIC_DIR", "mount_web_page"]
