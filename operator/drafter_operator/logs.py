"""The operator's log lines: text for people, JSON lines for log pipelines (`drafter-operator run --log-format`).

Both go through kopf's own logging setup (`kopf.configure`), so kopf's per-object loggers (the `logger`
its handlers receive) keep their object context: `[namespace/name]` before a text line, an `object`
field (apiVersion, kind, name, uid, namespace) in a JSON line. kopf's JSON formatter writes only the
message, a timestamp and a severity; the formatter set here is kopf's same class (python-json-logger
under it) asked for the logger's name and level as well, so a line says where it came from.
"""

from __future__ import annotations

import logging

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def json_formatter() -> logging.Formatter:
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message, kopf's `object` where the
    record carries one, `exc_info` for an exception."""
    # kopf exports no name for its JSON formatter; it is the class kopf.configure(log_format=JSON) uses.
    from kopf._core.actions.loggers import ObjectJsonFormatter

    return ObjectJsonFormatter(["name", "levelname", "message"], rename_fields={"name": "logger", "levelname": "level"},
                               timestamp="time", refkey="object")


def configure(log_format: str = "text", verbose: bool = False) -> None:
    """Route every log record to stderr in ``log_format`` (text or json), at DEBUG when ``verbose``."""
    import kopf

    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")
    if log_format == "json":
        from kopf._core.actions.loggers import ObjectJsonFormatter

        kopf.configure(verbose=verbose, log_format=kopf.LogFormat.JSON, log_refkey="object")
        for handler in logging.getLogger().handlers:
            if isinstance(handler.formatter, ObjectJsonFormatter):  # the handler kopf.configure just installed
                handler.setFormatter(json_formatter())
    else:
        kopf.configure(verbose=verbose, log_format=TEXT_FORMAT, log_prefix=True)
