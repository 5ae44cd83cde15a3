"""Planning for the endpoints that can reach a backend served by the Responses API only
(POST /v1/responses, and /v1/messages through litellm's bridge): chat's planning, except that
such a backend may be named too. Here, not in either endpoint's room, so neither imports the
other."""

from __future__ import annotations

from gateway.context import GatewayContext
from gateway.serving.plan.backend_named import named_backend
from gateway.serving.plan.planning import Plan, named_plan, plan_request

RESPONSES_MODE = "responses"  # litellm's mode of a model served by the Responses API only


async def plan_responses(ctx: GatewayContext, plan: Plan) -> Plan:
    """Chat's planning, except that a backend of litellm's ``responses`` mode (served by the
    Responses API only) may be named as a passthrough too."""
    if plan.route is not None or plan.pool.modes.get(plan.request.model) != RESPONSES_MODE:
        return await plan_request(ctx, plan)
    return await named_plan(plan, named_backend(plan))
