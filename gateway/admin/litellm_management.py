"""LiteLLM Proxy's management endpoints beyond keys, as one router for the app to mount:
/team/* (gateway/admin/teams.py), /user/* (users.py), /spend/logs (spend_logs.py) and
/model/info (model_info.py), all on the admin (LiteLLM master) key."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.admin import model_info, spend_logs, teams, users


def build_router() -> APIRouter:
    r = APIRouter()
    for module in (teams, users, spend_logs, model_info):
        r.include_router(module.build_router())
    return r
