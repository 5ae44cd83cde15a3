"""What routing costs a request: Tollgate (passthrough and ``auto``) beside LiteLLM's proxy.

One run, side by side, interleaved, with ``wrk`` (a C load generator: a Python client would
itself be the bottleneck) against one local fake OpenAI-compatible upstream:
  upstream     wrk straight to the fake upstream (the floor; it must not be the bottleneck)
  litellm      LiteLLM's proxy (``litellm[proxy]`` in its own venv, no database, no routing)
  passthrough  ``tollgate serve`` naming the backend (auth, budget, forwarding, log row)
  auto         ``tollgate serve`` with ``model="auto"`` (adds encode + head + search)
Each server runs one worker (``--workers``); Tollgate logs to SQLite in a temporary directory
(or ``--database-url``). Every request carries a unique ~50-token prompt (a wrk Lua script),
so no cache can answer it. Each round runs c=1 and c=32, streamed and not, over every target
in turn; the table shows medians over rounds, RSS is the peak of the largest process of each
server. ``routing_p50_ms`` is the decision alone (encode + head + search + tie-break) in this
process, for 20, 50 and 200-token prompts, with the share of those decisions that ran MiniLM
(the router's encoder cascade: the static encoder's decision stands when it is confident;
1.0 for a router without a cascade) and the share equal to MiniLM's own decision; and
``served_minilm_share``, the share of the served ``auto`` route's decisions under wrk that
ran MiniLM (its ``tollgate_routing_decisions`` counter: the route's own rule). The last line:
``routing_p50_ms=… added_p50_ms=… litellm_added_p50_ms=… throughput_ratio_c32=… rss_mb=…
litellm_rss_mb=… passthrough_ratio_c32=… minilm_share=… served_minilm_share=… errors=…``
(added = p50 at c=1 minus
the upstream's; the ratios are auto's and passthrough's req/s at c=32 over LiteLLM's, not
streamed; RSS is Tollgate's and LiteLLM proxy's peak per worker; errors are the proxies',
Tollgate's and LiteLLM's, over every cell).

    python -m bench.serving.overhead [--rounds 3] [--duration 10] [--database-url postgresql://...]
                             [--encoder minilm-onnx-int8 | --router ARTIFACT] [--workers N]

Installs ``wrk`` with apt-get and LiteLLM's proxy into ``$TOLLGATE_CACHE_DIR/bench`` when
missing (needs the package registries once). Modules: ``run`` (the servers and the wrk
rounds), ``decision`` (the routing decision in this process), ``report`` (the table and the
last line).
"""
