"""API keys: generation, keyed hashing, and the server secret.

A key is shown once and stored only as HMAC-SHA256(secret, key). With a keyed hash a stolen
database alone cannot confirm guesses offline; the secret comes from `TOLLGATE_SECRET` or,
when unset, is generated once and persisted in the `settings` table (first writer wins, so
replicas agree). Set `TOLLGATE_SECRET` for the gateway and the CLI alike, or for neither.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from gateway.store.models import settings

KEY_PREFIX = "sk-tg-"
MAX_KEY_LENGTH = 200
SECRET_SETTING = "api_key_hmac_secret"


def generate_key() -> str:
    """A new API key: the prefix and 256 random bits, URL-safe."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def display_prefix(key: str) -> str:
    """The part of a key safe to show in listings (prefix + 4 random characters)."""
    return key[: len(KEY_PREFIX) + 4]


def hash_key(secret: bytes, key: str) -> str:
    return hmac.new(secret, key.encode("utf-8"), hashlib.sha256).hexdigest()


def plausible_key(key: str) -> bool:
    """Cheap shape check so garbage never costs a database lookup."""
    return key.startswith(KEY_PREFIX) and len(key) <= MAX_KEY_LENGTH and key.isascii()


def load_or_create_secret(engine: Engine) -> bytes:
    """`TOLLGATE_SECRET`, else the persisted secret, else a new one persisted now."""
    env = os.environ.get("TOLLGATE_SECRET")
    if env:
        return env.encode("utf-8")
    query = select(settings.c.value).where(settings.c.key == SECRET_SETTING)
    with engine.connect() as conn:
        value = conn.execute(query).scalar_one_or_none()
    if value is None:
        try:
            with engine.begin() as conn:
                conn.execute(insert(settings).values(key=SECRET_SETTING,
                                                     value=secrets.token_hex(32)))
        except IntegrityError:
            pass  # another replica created it first; use theirs
        with engine.connect() as conn:
            value = conn.execute(query).scalar_one()
    return bytes.fromhex(value)
