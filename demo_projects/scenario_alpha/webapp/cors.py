"""CORS checks for incoming requests."""

from webapp.settings import allowed_origins


def is_origin_allowed(origin, env=None):
    return origin in allowed_origins(env)


def cors_headers(origin, env=None):
    """Response headers for a request from `origin`: empty when the origin is not allowed."""
    if not is_origin_allowed(origin, env):
        return {}
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
