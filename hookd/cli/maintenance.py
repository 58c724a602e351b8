"""The commands that change the database as a whole: ``hookd db upgrade`` (the schema)
and ``hookd keys rotate`` (the encryption of every stored body)."""

from __future__ import annotations

from hookd.cli.context import database
from hookd.cli.parser import EXIT_OK
from hookd.errors import ConfigError
from hookd.settings import Settings


def cmd_db_upgrade(settings: Settings) -> int:
    """Unlike the other commands, no pre-flight check: this is what creates the SQLite
    file and brings an older schema to this version's."""
    from store import db, migrate

    migrate.upgrade(settings.database_url)
    print(
        f"hookd: database {db.describe(settings.database_url)} at schema "
        f"{migrate.head_revision(settings.database_url)}"
    )
    return EXIT_OK


async def cmd_keys_rotate(settings: Settings) -> int:
    from store.crypto import BodyCipher
    from store.keys import rotate_bodies

    cipher = BodyCipher(settings.encryption_keys)
    if not cipher.enabled:
        raise ConfigError(
            "environment: HOOKD_ENCRYPTION_KEYS: set the new key first, followed by the old ones"
        )
    async with database(settings) as engine:
        done = await rotate_bodies(engine, cipher)
    print(
        f"hookd: {done.reencrypted} bodies re-encrypted, {done.encrypted} plain bodies encrypted "
        "with the first key; the other keys can now be removed"
    )
    return EXIT_OK
