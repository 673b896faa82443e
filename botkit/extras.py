"""Optional dependencies: a feature whose extra is not installed says which one to install."""

from __future__ import annotations

import importlib

from botkit.errors import ConfigError

__all__ = ["POSTGRES_MODULES", "require_extra", "require_postgres"]


def require_extra(module: str, extra: str, feature: str) -> None:
    """Import ``module``, or raise ``ConfigError`` saying ``feature`` needs botkit's ``extra``."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(
            f"{feature} needs botkit's {extra!r} extra, which is not installed: "
            f"pip install 'botkit[{extra}]'"
        ) from e


POSTGRES_MODULES = ("asyncpg", "procrastinate", "psycopg")
"""What the ``postgres`` extra installs: the stores, the job queue, and its driver."""


def require_postgres(feature: str) -> None:
    """Raise ``ConfigError`` unless the ``postgres`` extra is installed."""
    for module in POSTGRES_MODULES:
        require_extra(module, "postgres", feature)
