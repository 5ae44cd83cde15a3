"""Prompt keys: what the learning tables (``learning_prompts``, ``learning_requests``,
``observations``) call a prompt, keyed with the deployment secret.

A prompt's key is ``HMAC-SHA256(k, SHA-256(text))`` with ``k`` derived from the server secret
(``TOLLGATE_SECRET`` or the one generated into the database, ``gateway.store.keys``), so
someone with the database but not the secret cannot confirm a guessed prompt against
``learning_prompts`` even when ``log_prompts`` is off. The inner SHA-256 is what earlier
versions stored unkeyed: ``upgrade`` re-keys those rows in place (``rekey`` needs no text), once
per database, in one transaction marked in ``settings`` (``learning_prompt_keys = hmac-v1``), so
every observation already learned stays attached to its prompt and to new requests with the
same text.

Which secret: an explicit ``secret``, else the one the learning loop set for the task at hand
(``CURRENT``, a context variable inherited by the tasks it spawns), else the last one a store
of this process loaded (one gateway per process in production).
"""

from __future__ import annotations

import hashlib
import hmac
from contextvars import ContextVar

from sqlalchemy import Engine, insert, select, text
from sqlalchemy.exc import IntegrityError

from gateway.store.models import settings

MARKER = "learning_prompt_keys"
SCHEME = "hmac-v1"
TABLES = ("learning_prompts", "learning_requests", "observations")
CURRENT: ContextVar[bytes | None] = ContextVar("tollgate_prompt_secret", default=None)
_process: list[bytes] = []


def derive(server_secret: bytes) -> bytes:
    """The prompt-key secret: apart from the API-key hashes made with the server secret."""
    return hmac.new(server_secret, b"tollgate-learning-prompt-key", hashlib.sha256).digest()


def use(server_secret: bytes) -> bytes:
    """Make ``server_secret``'s prompt key this process's default; returns it."""
    k = derive(server_secret)
    _process[:] = [k]
    return k


def rekey(unkeyed_hex: str, k: bytes) -> str:
    return hmac.new(k, bytes.fromhex(unkeyed_hex), hashlib.sha256).hexdigest()


def prompt_key(prompt: str, secret: bytes | None = None) -> str:
    """The key of ``prompt`` (``secret``: a prompt-key secret from ``derive``/``use``)."""
    k = secret or CURRENT.get() or (_process[0] if _process else None)
    if k is None:
        raise RuntimeError("prompt keys need the deployment secret: no store has loaded it")
    return rekey(hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest(), k)


def upgrade(engine: Engine, server_secret: bytes) -> int:
    """Re-key rows stored with unkeyed SHA-256 prompt keys, once per database; returns how
    many distinct keys were re-keyed (0 when done before, by this replica or another)."""
    k = derive(server_secret)
    with engine.connect() as conn:
        done = conn.execute(select(settings.c.value).where(settings.c.key == MARKER)).first()
    if done is not None:
        return 0
    try:
        with engine.begin() as conn:
            # the marker first: a replica upgrading at the same time waits on it, then fails
            conn.execute(insert(settings).values(key=MARKER, value=SCHEME))
            present = set(conn.dialect.get_table_names(conn))
            tables = [t for t in TABLES if t in present]
            old: set[str] = set()
            for t in tables:
                old.update(r[0] for r in conn.execute(text(f"SELECT DISTINCT prompt_key FROM {t}")))
            for key in old:
                try:
                    new = rekey(key, k)
                except ValueError:  # not a hex digest: not one of ours, leave it
                    continue
                for t in tables:
                    conn.execute(text(f"UPDATE {t} SET prompt_key = :new WHERE prompt_key = :old"),
                                 {"new": new, "old": key})
            return len(old)
    except IntegrityError:
        return 0
