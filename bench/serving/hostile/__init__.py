"""Hostile-tenant report: every abuse of a multi-tenant gateway we know of, replayed against two
`tollgate serve` replicas sharing PostgreSQL and Redis, plus a property-based fuzz.

    python -m bench.serving.hostile            # full size (several minutes)
    python -m bench.serving.hostile --small    # fewer fuzz examples

Scenarios (abuse.py, stall.py and fuzz.py: earlier rounds; budgets.py and neighbours.py:
issue 24):
1. overspend: concurrent requests over both replicas with CJK and emoji text, a
   ``detail: high`` image, functions and a response_format schema, to an upstream that bills
   the most any tokenizer could (one token per UTF-8 byte, 1,600 tokens per image), against a
   $0.50 budget; overspend = max(0, spent + overrun − budget).
2. client faults: untyped content parts, NaN temperature, tools that are not objects, n =
   10**16, deep JSON...; every one must be a 4xx.
3. loop stall: /health polled every 20 ms on one replica while an image that never loads and
   an 8 MB prompt are in flight; the stall is the slowest /health minus the median before.
4. fuzz: schemathesis over the OpenAPI schema and hypothesis bodies for chat and feedback:
   the count of 5xx answers.
5. lost rows: NUL in prompts and model names, and every request of the run: request ids
   without a log row.
6. metrics: /metrics without a key and with a tenant key: answers that were not 401.
7. burst: 200 concurrent ``auto`` requests (OpenAI SDK, max_tokens=64) over both replicas on
   a budget paying for about 50 (sized from a pre-burst on a tight budget, which routes as
   the burst does): burst_served_share = answered / min(200, budget / the burst's own cost
   per answer). Its ceiling is the hard budget's: a request is admitted only while its
   worst-case reservation fits what the settled spend leaves, so at most
   ⌊(budget − reservation) / cost⌋ + 1 are answered; the result line prints that share as
   ``bound_ceiling_share`` beside it (reservation / cost is 23 here: a 175-token byte bound
   and 64 output tokens held for an answer the fake upstream bills as 7 + 3 tokens).
8. timeouts: non-streamed requests whose backend times out (5 plain, 1 with two body
   ``fallbacks``): timeout_undercharge_usd = Σ max(0, what the provider bills (prompt plus
   the output cap it was sent, per attempt it received) − what the tenant was charged).
9. fee parameters (``web_search_options``, ``service_tier: priority``): fee_params_unpriced
   = those answered, forwarded upstream and booked no dearer than the plain request.
10. overrun: 20 concurrent requests to a backend that answers 2,000 tokens whatever cap it
    was sent, on a $0.05 budget: overrun_multiple = (spent + overrun) / budget; the bound
    printed beside it is gateway/serving/budget/budget_gate.py's (1 + replicas × exposure + one
    request per replica).
11. tpm: tokens_per_minute 1,000, 20 concurrent ~170-token requests: tpm_overadmit =
    answered tokens / limit.
12. breakers: 6 streams that litellm cuts as repeating and 6 generations longer than the
    backend's timeout, from one tenant on one replica; breakers_opened_by_client counts the
    openings of the whole run, except of the backends that hang for everyone.
13. dashboard: 50,000 log rows, 12 concurrent admin summaries on one replica:
    dashboard_peak_mb = its peak RSS during them − its RSS before (sampled every 10 ms);
    dashboard_neighbour_p50_ratio = another tenant's chat p50 on that replica while they
    run / its p50 before (target ≤ 2).
14. crash (crash.py, issue 35): a third replica on the same database, holding a $0.05
    tenant's reservations, killed with SIGKILL and started again with no replica_id:
    stale_reservation_after_kill_usd = what is still held once it is ready (target 0);
    then ``--workers 2`` with the master alone killed: orphaned_workers (target 0).
15. keys (keys.py, issue 35): a key limited to one backend asks for ``fallbacks`` outside its
    list on chat, Responses and completions (key_models_bypass = answers from outside it);
    20 concurrent overruns of a team-less key with max_budget $0.05 (key_overrun_multiple =
    its spend / max_budget; the provider's bill beside it); a key deleted while 39 of its
    requests wait (waiting_delete_5xx, and the requests served after the delete); a
    team-mate's small requests beside another key's 300 waiting ones (teammate_p50_ratio =
    p50 during / p50 idle); the database cut under outage policy ``allow`` (allowance $0.008
    per replica) with a team-less and a team key of max_budget $0.02
    (key_outage_overspend_multiple = the larger key spend after replay / max_budget).
16-20. issue 35's input bounds (inputs.py says each): file refs (file_ref_unbounded),
    overrun lockouts (overrun_lockouts), embeddings' TPM (emb_tpm_overadmit) and rows
    (emb_lost_rows), a 15,000-tool request against the loop (tools_loop_stall_ms).
21. user keys (principals.py, issue 48.11): one user's three keys (two teams, one team-less)
    make 12 timeouts on one backend, then another tenant's 8 requests to it:
    breaker_keys_as_tenants = those answered 503 (target 0).
22. early streams (early_streams.py, issue 48.1): /v1/messages streams on an Anthropic-wire
    backend that the client leaves at 90% or the upstream ends cleanly half way:
    messages_abort_undercharge_multiple = what the provider generated / what the tenants
    were charged (target ≤ 1).
23. rollback (rollback.py, issue 48): a refinement published, rolled back at once by
    ``tollgate router rollback`` while a refinement is due on both replicas: rollback_undone =
    versions other than the operator's active in the 20 s after (target 0).
24-25. issue 48's lookups (lookups.py says each): unknown ids on /v1/routing/{id}
    (routing_poll_neighbour_p50_ratio) and /spend/logs over a far date
    (spend_logs_stall_ms).
26-32. issue 48's unit endpoints, count_tokens, cache and slow bodies, on an environment of
    their own with the cache on (unit_limits.py says each): audio_header_undercharge_multiple,
    image_quality_undercharge_multiple, unit_parallel_overadmit,
    count_tokens_neighbour_p50_ratio, cache_ttl_max_s, zero_budget_cached_answers,
    slow_body_open_after_s (the last line's fields after the ones below).
Also printed: feedback floods, key guessing (throttled), the dashboard cookie.

The last line: ``overspend_usd=… breakers_opened_by_client=… loop_stall_ms=… fuzz_5xx=…
lost_rows=… metrics_open=… burst_served_share=… timeout_undercharge_usd=…
fee_params_unpriced=… overrun_multiple=… dashboard_peak_mb=… tpm_overadmit=…
key_models_bypass=… key_outage_overspend_multiple=… key_overrun_multiple=…
waiting_delete_5xx=… teammate_p50_ratio=… bound_ceiling_share=… file_ref_unbounded=…
overrun_lockouts=… emb_tpm_overadmit=… emb_lost_rows=… tools_loop_stall_ms=…
dashboard_neighbour_p50_ratio=… stale_reservation_after_kill_usd=…
breaker_keys_as_tenants=… messages_abort_undercharge_multiple=… rollback_undone=…
routing_poll_neighbour_p50_ratio=… spend_logs_stall_ms=…``. A provider's report
past a reservation is the operator's (gateway/serving/budget/bound_factors.py): overspend counts the
tenant's spend.
"""
