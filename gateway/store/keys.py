"""API keys: generation, keyed hashing, and the server secret.

A key is shown once and stored only as HMAC-SHA256(secret, key). With a keyed hash a stolen
database alone cannot confirm guesses offline; the secret comes from `TOLLGATE_SECRET` or,
when unset, is generated once and persisted in the `settings` table (first writer wins, so
replicas agree). Set `TOLLGATE_SECRET` for the gateway and the CLI alike, or for neither.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from gateway.store.models import settings

log = logging.getLogger(__name__)

KEY_PREFIX = "sk-tg-"
# keys a caller chose (LiteLLM's /key/generate takes a ``key``) need only LiteLLM's "sk-"
CHOSEN_KEY_PREFIX = "sk-"
MIN_CHOSEN_KEY_LENGTH = 16
MAX_KEY_LENGTH = 200
SECRET_SETTING = "api_key_hmac_secret"
FINGERPRINT_SETTING = "api_key_secret_fingerprint"


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
    return (key.startswith(CHOSEN_KEY_PREFIX) and MIN_CHOSEN_KEY_LENGTH <= len(key)
            <= MAX_KEY_LENGTH and key.isascii() and key.isprintable())


def check_chosen_key(key: str) -> str:
    """A key the caller chose, if it could authenticate (ValueError naming the rule)."""
    if not plausible_key(key) or any(c.isspace() for c in key):
        raise ValueError(f"a chosen key must start with {CHOSEN_KEY_PREFIX!r} and have "
                         f"{MIN_CHOSEN_KEY_LENGTH} to {MAX_KEY_LENGTH} printable ASCII "
                         "characters without spaces")
    return key


def load_or_create_secret(engine: Engine) -> bytes:
    """`TOLLGATE_SECRET`, else the persisted secret, else a new one persisted now.

    The first secret used on a database leaves a fingerprint in `settings`; a later start
    with a different secret (TOLLGATE_SECRET set on one side only, or changed) logs an error,
    because every existing key would then silently fail to authenticate.
    """
    env = os.environ.get("TOLLGATE_SECRET")
    secret = env.encode("utf-8") if env else _persisted_secret(engine)
    fingerprint = hmac.new(secret, b"tollgate-secret-fingerprint", hashlib.sha256).hexdigest()
    stored = _insert_once(engine, FINGERPRINT_SETTING, fingerprint)
    if not hmac.compare_digest(stored, fingerprint):
        log.error("the API-key secret differs from the one this database's keys were made "
                  "with (TOLLGATE_SECRET set or changed on one side only?): existing keys "
                  "will not authenticate")
    return secret


def _persisted_secret(engine: Engine) -> bytes:
    return bytes.fromhex(_insert_once(engine, SECRET_SETTING, secrets.token_hex(32)))


def _insert_once(engine: Engine, key: str, value: str) -> str:
    """The setting's value, inserting `value` if absent (first writer wins across replicas)."""
    query = select(settings.c.value).where(settings.c.key == key)
    with engine.connect() as conn:
        current = conn.execute(query).scalar_one_or_none()
    if current is not None:
        return str(current)
    try:
        with engine.begin() as conn:
            conn.execute(insert(settings).values(key=key, value=value))
    except IntegrityError:
        pass  # another replica wrote it first; use theirs
    with engine.connect() as conn:
        return str(conn.execute(query).scalar_one())
