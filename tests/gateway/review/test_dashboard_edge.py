"""The dashboard's edges: a paging offset no database can take is a 400 (OpenAI error body),
not a 500; a login or logout form posted from another site is refused."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.conftest import ADMIN_KEY, Gateway


@pytest.mark.parametrize("offset", ["1e20", "100000000000000000000", "-1"])
def test_absurd_offset_is_a_400(gateway: Gateway, offset: str) -> None:
    r = httpx.get(gateway.base_url + f"/dashboard/api/requests?offset={offset}",
                  headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_login_refuses_a_cross_origin_form(gateway: Gateway) -> None:
    own = gateway.base_url  # http://127.0.0.1:PORT
    port = own.rsplit(":", 1)[1]
    for origin in ("https://evil.example", f"http://127.0.0.1:{int(port) + 1}", "null"):
        r = httpx.post(own + "/dashboard/login", data={"key": ADMIN_KEY},
                       headers={"origin": origin}, timeout=30)
        assert r.status_code == 403 and "set-cookie" not in r.headers, origin
    r = httpx.post(own + "/dashboard/login", data={"key": ADMIN_KEY}, timeout=30,
                   headers={"referer": "https://evil.example/page"})
    assert r.status_code == 403 and "set-cookie" not in r.headers
    for headers in ({"origin": own}, {"referer": own + "/dashboard"}, {}):
        r = httpx.post(own + "/dashboard/login", data={"key": ADMIN_KEY}, headers=headers,
                       timeout=30)
        assert r.status_code == 303 and "set-cookie" in r.headers, headers
    cookie = r.cookies
    r = httpx.post(own + "/dashboard/logout", cookies=cookie, timeout=30,
                   headers={"origin": "https://evil.example"})
    assert r.status_code == 403
