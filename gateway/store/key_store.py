"""`KeyStore`: the asynchronous side of LiteLLM's key API (gateway/store/key_admin.py), run in
the store's bounded worker threads. Each change that can make a key stop working or narrow it
goes through the store's revoking path: the Redis revocation counter bumped around it and this
replica's key cache dropped (the revocation epoch moves in the change's own transaction)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import Engine

import gateway.store.key_admin as keyadmin
from gateway.store.key_admin import KeyDetails, KeyFields
from gateway.store.records import Tenant

Run = Callable[..., Awaitable[Any]]


class KeyStore:
    def __init__(self, engine: Engine, run: Run, revoking: Run, secret: Callable[[], bytes],
                 clock: Callable[[], datetime]) -> None:
        self._engine, self._run, self._revoking = engine, run, revoking
        self._secret, self._clock = secret, clock

    async def generate(self, fields: KeyFields, team: str | None = None,
                       key: str | None = None) -> tuple[str, KeyDetails]:
        return await self._run(keyadmin.generate, self._engine, self._secret(), self._clock(),
                               fields, team, key)

    async def find(self, ident: str) -> str:
        """The id of the live key named by the key itself, its token or its id."""
        return await self._run(keyadmin.find, self._engine, self._secret(), ident)

    async def info(self, key_id: str) -> KeyDetails:
        return await self._run(keyadmin.info, self._engine, key_id, self._clock())

    async def update(self, key_id: str, fields: KeyFields, team: str | None = None
                     ) -> KeyDetails:
        return await self._revoking(partial(keyadmin.update_key, fields=fields, team=team),
                                    self._engine, key_id, self._clock())

    async def delete(self, key_ids: list[str], aliases: list[str]) -> list[str]:
        return await self._revoking(keyadmin.delete_keys, self._engine, key_ids, aliases,
                                    self._clock())

    async def list(self, **filters: Any) -> tuple[list[KeyDetails], int]:
        return await self._run(partial(keyadmin.list_keys, **filters), self._engine,
                               self._clock())

    async def master_tenant(self) -> Tenant | None:
        """The tenant of the master key's own calls (key_admin.master_tenant)."""
        return await self._run(keyadmin.master_tenant, self._engine, self._clock())
