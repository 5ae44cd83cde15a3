"""`LiteLLMAdmin`: the asynchronous side of LiteLLM's team, user and spend-log endpoints
(gateway/store/teams.py, users.py, spend_logs.py), run in the store's bounded worker threads.
Changes that can make keys stop working (a team or user deleted, a team's budget or limits
changed) go through the store's revoking path, as the key API's do (gateway/store/key_store.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import Engine

import gateway.store.keys as keylib
import gateway.store.spend_logs as spendlib
import gateway.store.teams as teamlib
import gateway.store.tenants as admin
import gateway.store.users as userlib
from gateway.store.policy import TenantPolicy
from gateway.store.teams import Team
from gateway.store.users import User

Run = Callable[..., Awaitable[Any]]


class LiteLLMAdmin:
    def __init__(self, engine: Engine, run: Run, revoking: Run, secret: Callable[[], bytes],
                 clock: Callable[[], datetime]) -> None:
        self._engine, self._run, self._revoking = engine, run, revoking
        self._secret, self._clock = secret, clock

    # -- teams ---------------------------------------------------------------------------
    async def team_id(self, team: str) -> str:
        return await self._run(teamlib.team_id_of, self._engine, team)

    async def new_team(self, **fields: Any) -> Team:
        return await self._run(partial(teamlib.new_team, **fields), self._engine, self._clock())

    async def team(self, team: str) -> Team:
        return await self._run(teamlib.get_team, self._engine, team, self._clock())

    async def teams(self, ids: list[str] | None = None) -> list[Team]:
        return await self._run(teamlib.list_teams, self._engine, self._clock(), ids)

    async def update_team(self, tenant_id: str, ledger: dict[str, Any],
                          policy: TenantPolicy | None, alias: Any, metadata: Any) -> Team:
        """``ledger``: budget_usd / period changes (tenants.update_tenant); ``policy`` the
        whole new policy (None: unchanged)."""
        if ledger or policy is not None:
            await self._revoking(partial(admin.update_tenant, policy=policy, **ledger),
                                 self._engine, tenant_id, self._clock())
        return await self._run(partial(teamlib.rename_team, alias=alias, metadata=metadata),
                               self._engine, tenant_id, self._clock())

    async def delete_teams(self, tenant_ids: list[str]) -> None:
        await self._revoking(teamlib.delete_teams, self._engine, tenant_ids, self._clock())

    # -- users ---------------------------------------------------------------------------
    async def new_user(self, user_id: str | None, fields: dict[str, Any]) -> User:
        return await self._run(userlib.new_user, self._engine, self._clock(), user_id, fields)

    async def find_user(self, user_id: str | None, user_email: str | None = None) -> str:
        return await self._run(userlib.find_user, self._engine, user_id, user_email)

    async def user_role(self, user_id: str) -> str | None:
        return await self._run(userlib.user_role, self._engine, user_id)

    async def user(self, user_id: str) -> User:
        return await self._run(userlib.get_user, self._engine, user_id)

    async def update_user(self, user_id: str, fields: dict[str, Any]) -> User:
        return await self._run(userlib.update_user, self._engine, user_id, fields)

    async def delete_users(self, user_ids: list[str]) -> list[str]:
        return await self._revoking(userlib.delete_users, self._engine, user_ids,
                                    self._clock())

    # -- spend logs ----------------------------------------------------------------------
    def key_hash(self, key: str) -> str:
        """A key's token (its keyed hash), as /key/generate answers it."""
        return keylib.hash_key(self._secret(), key)

    async def spend_rows(self, f: spendlib.SpendFilter, page: int = 1,
                         page_size: int = spendlib.PAGE_MAX
                         ) -> tuple[list[dict[str, Any]], bool]:
        return await self._run(spendlib.spend_rows, self._engine, f, page, page_size)

    async def spend_groups(self, f: spendlib.SpendFilter) -> tuple[list[dict[str, Any]], bool]:
        return await self._run(spendlib.spend_groups, self._engine, f)
