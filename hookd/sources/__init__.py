"""Sources: the TOML file that names each webhook source, its secrets and settings.

``Settings.from_env()`` is the one place the environment is read; everything
else is handed a ``Settings`` and a ``Sources``. Every problem with the sources
file raises ``ConfigError`` whose text is one line naming file, source and key.

The package: ``models`` (the tables, ``Source`` and ``Sources``), ``loader`` (the file
read, each source validated and checked in turn), ``problems`` (how an error names its
key), ``checks`` (what the models cannot say alone), ``urls`` (where secrets are sent),
``notify`` and ``notify_checks`` (the ``[[notify]]`` channels and ``[alerts]``).
"""

from hookd.sources.loader import SourcesFileMissing, load_sources, parse_sources
from hookd.sources.models import (
    DAY_S,
    RetentionConfig,
    Source,
    SourceConfig,
    Sources,
    api_url,
    keys_needed,
)
from hookd.sources.urls import internal_target

__all__ = [
    "DAY_S",
    "RetentionConfig",
    "Source",
    "SourceConfig",
    "Sources",
    "SourcesFileMissing",
    "api_url",
    "internal_target",
    "keys_needed",
    "load_sources",
    "parse_sources",
]
