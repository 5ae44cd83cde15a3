"""bench/serving/stack_attribution.py: py-spy samples charged to the components the profile reports."""

from bench.serving.stack_attribution import categorise, hot_call

SP = "/venv/lib/python3.11/site-packages"
TG = "/work/tollgate"
LOOP = [f"run ({TG}/gateway/reliability/shutdown.py:64)", f"Server.run ({SP}/uvicorn/server.py:86)"]


def test_acompletion_is_litellm_and_its_socket_work_transport():
    call = [*LOOP, f"chat_completions ({TG}/gateway/serving/chat/handler.py:50)",
            f"chat ({TG}/gateway/provider/litellm_transport.py:120)",
            f"acompletion ({SP}/litellm/main.py:500)"]
    assert categorise([*call, f"ModelResponse.__init__ ({SP}/litellm/utils.py:9)"]) == "litellm"
    assert categorise([*call, f"AsyncClient.send ({SP}/httpx/_client.py:1)"]).startswith(
        "transport")


def test_litellm_in_its_executor_thread_is_litellm_but_tollgate_token_counting_is_plan():
    thread = ["Thread.run (/py/threading.py:982)", "_WorkItem.run (/py/concurrent/futures/thread.py:58)"]
    assert categorise([*thread, f"completion ({SP}/litellm/main.py:5845)"]) == "litellm"
    counting = [*thread, f"both ({TG}/gateway/serving/plan/planning.py:230)",
                f"count_prompt_tokens ({TG}/gateway/pricing.py:170)",
                f"token_counter ({SP}/litellm/utils.py:1)"]
    assert categorise(counting) == "tollgate: plan"
    assert hot_call(counting, "tollgate: plan") == (
        "gateway/pricing.py:count_prompt_tokens → token_counter (litellm/utils.py)")


def test_sql_is_charged_with_the_step_running_it_and_middleware_to_the_server():
    settle = ["Thread.run (/py/threading.py:982)", f"Store._run ({TG}/gateway/store/store.py:190)",
              f"settle ({TG}/gateway/store/ledger.py:240)",
              f"Connection.execute ({SP}/sqlalchemy/engine/base.py:1)"]
    assert categorise(settle) == "sqlalchemy+sqlite [budget]"
    middleware = [*LOOP, f"BodyLimit.__call__ ({TG}/gateway/serving/body_limit.py:40)",
                  f"ExceptionMiddleware.__call__ ({SP}/starlette/middleware/exceptions.py:1)"]
    assert categorise(middleware).startswith("server")
    assert categorise([*LOOP, f"_run_once ({SP}/uvloop/loop.py:1)"]) == "asyncio/other"
