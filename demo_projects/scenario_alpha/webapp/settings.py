"""Settings read from the process environment."""

import os


def allowed_origins(env=None):
    """The origins that may call the API, from ALLOWED_ORIGINS (comma-separated)."""
    env = os.environ if env is None else env
    raw = env.get("ALLOWED_ORIGINS", "")
    return [origin for origin in raw.split(",") if origin]
