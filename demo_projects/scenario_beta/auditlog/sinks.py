"""Audit sinks configured from the environment."""

import os

KNOWN_SINKS = {"audit_log", "metrics", "siem_export"}


def normalize_sink_name(raw):
    """A configured sink name as an identifier: `Audit-Log` -> `audit_log`."""
    return raw.replace("-", "_")


def configured_sinks(env=None):
    """The sinks named in AUDIT_SINKS (comma-separated), normalised."""
    env = os.environ if env is None else env
    raw = env.get("AUDIT_SINKS", "")
    return [normalize_sink_name(name) for name in raw.split(",") if name]


def unknown_sinks(env=None):
    """Configured sinks that this service cannot deliver to."""
    return [name for name in configured_sinks(env) if name not in KNOWN_SINKS]
