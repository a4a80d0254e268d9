"""The aiohttp application of `railab ui`: pages, JSON endpoints, one WebSocket feed per
lab. Every write is the call the CLI makes (dataplane.lab.fabric.Fabric, dataplane.lab.faults, `railab
run`); the server's only memory is the last port_load reply of each watched lab, which
the next poll rebuilds. The feed asks the agent only for what the page draws (port_load:
per port a few totals and states, per switch its modes), not the full counters reply.

Writes (POST) need the token printed at start, in the X-Railab-Token header or the token
query parameter; with read_only every write is refused. Writes and the WebSocket feed from
another origin (a page of another site driving the user's browser) are refused whatever
they carry. All answer 403 and change nothing.
Blocking calls (the agent's socket, netlink in a namespace, reading a results folder) run in
worker threads so the feed keeps its pace."""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import WSMsgType, web

from dataplane.agent import client
from dataplane.agent.protocol import LOAD_FIELDS
from dataplane.errors import RailabError, RuntimeStateError
from dataplane.lab import faults, ports
from dataplane.lab.fabric import MODES, Fabric
from dataplane.runtime import state
from dataplane.ui import layout as layout_mod, live, runs, validate
from dataplane.ui.validate import BadRequest

STATIC = Path(__file__).parent / "static"
TOKEN_HEADER = "X-Railab-Token"
FEED_IDLE_S = 10.0          # a feed nobody watches or asks stops after this
log = logging.getLogger("railab.ui")


@dataclass
class Settings:
    token: str
    read_only: bool = False
    interval_s: float = 0.5
    experiments: Path = Path("experiments")
    results: Path = Path("results")
    allowed_hosts: set[str] | None = None     # None: any Host header


# ---------------------------------------------------------------- the live feed of one lab
@dataclass
class Feed:
    """Polls one lab's agent every interval while someone watches, and sends each update
    to every subscribed WebSocket."""
    lab: str
    spec: object
    interval_s: float
    links: list = field(default_factory=list)
    ends: list = field(default_factory=list)      # live.plan(links): which ports each link reads
    subscribers: set = field(default_factory=set)
    latest: dict | None = None
    prev: tuple | None = None              # (port_load reply, when the agent read it)
    last_use: float = field(default_factory=time.monotonic)
    task: asyncio.Task | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def _poll(self) -> dict | None:
        """One port_load read and the update from it and the read before (in a worker
        thread). dt is the agent's own time between the two reads."""
        reply = client.request(self.lab, "port_load")
        when = time.monotonic()
        if reply.get("fields") != list(LOAD_FIELDS):
            raise RuntimeStateError(f"lab {self.lab}: its agent sends port_load fields {reply.get('fields')}, "
                                    f"this railab reads {list(LOAD_FIELDS)} (redeploy the lab)")
        reply_t = reply["t_ns"] / 1e9 if reply.get("t_ns") else when
        prev, self.prev = self.prev, (reply, reply_t)
        if prev is None:
            return None
        return live.frame(self.ends, prev[0], reply, stamp=time.time(), dt=reply_t - prev[1],
                          faults=faults.recorded(self.lab))

    async def _tick(self) -> dict | None:
        return await asyncio.get_running_loop().run_in_executor(None, self._poll)

    async def run(self) -> None:
        due = time.monotonic()
        try:
            while self.subscribers or time.monotonic() - self.last_use < FEED_IDLE_S:
                # polls on a fixed schedule (every interval from the first), so wake-up delays
                # do not add up; a poll that overran starts the next one at once
                due = max(due + self.interval_s, time.monotonic())
                try:
                    update = await self._tick()
                except RailabError as err:
                    update = {"error": str(err)}
                if update is not None:
                    self.latest = update
                    self.ready.set()
                    text = json.dumps(update, separators=(",", ":"))
                    await asyncio.gather(*(self._send(ws, text) for ws in list(self.subscribers)))
                await asyncio.sleep(max(0.0, due - time.monotonic()))
        finally:
            self.task = None
            self.ready.clear()
            self.prev = None

    async def _send(self, ws: web.WebSocketResponse, text: str) -> None:
        try:
            await asyncio.wait_for(ws.send_str(text), timeout=self.interval_s * 4)
        except (ConnectionError, asyncio.TimeoutError, RuntimeError):
            self.subscribers.discard(ws)

    def ensure_running(self) -> None:
        self.last_use = time.monotonic()
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.run())


# ---------------------------------------------------------------- helpers
def _json(data, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, indent=1))


def _lab_state(lab: str) -> state.LabState:
    try:
        state.check_lab_name(lab)
    except RailabError as err:
        raise BadRequest(str(err), 404) from None
    current = state.load(lab)
    if current is None:
        raise BadRequest(f"lab {lab} is not deployed", 404)
    if current.status != "up":
        raise BadRequest(f"lab {lab} is {current.status}, not up", 409)
    return current


async def _blocking(fn, *args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


async def _body(request: web.Request):
    try:
        return await request.json()
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the body is not JSON") from None


def _host_allowed(request: web.Request, allowed: set[str] | None) -> bool:
    """A page of another site that resolves its own name to 127.0.0.1 (DNS rebinding)
    sends its own name as Host: only the names of this machine's loopback are served."""
    if allowed is None:
        return True
    return (request.url.host or "").strip("[]") in allowed


# ---------------------------------------------------------------- the application
def cross_origin(request: web.Request) -> str | None:
    """Why a request comes from another origin's page, or None. Browsers send Origin on
    writes and WebSocket upgrades, and Sec-Fetch-Site on every request; scripts and curl
    send neither, and are judged by the token alone."""
    site = request.headers.get("Sec-Fetch-Site")
    if site not in (None, "same-origin", "none"):
        return f"Sec-Fetch-Site: {site}"
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        return f"Origin {origin}"
    return None


def make_app(settings: Settings) -> web.Application:
    feeds: dict[str, Feed] = {}
    locks: dict[str, asyncio.Lock] = {}

    @web.middleware
    async def guard(request: web.Request, handler):
        try:
            if not _host_allowed(request, settings.allowed_hosts):
                raise BadRequest(f"host {request.host!r} is not served (use the address railab ui printed)", 403)
            writes = request.method not in ("GET", "HEAD")
            if writes or request.headers.get("Upgrade", "").lower() == "websocket":
                foreign = cross_origin(request)
                if foreign:
                    raise BadRequest(f"a request from another site's page ({foreign}) is refused: "
                                     "nothing was changed", 403)
            if writes:
                if settings.read_only:
                    raise BadRequest("this server is read-only (railab ui --read-only): nothing was changed", 403)
                given = request.headers.get(TOKEN_HEADER) or request.query.get("token") or ""
                if not hmac.compare_digest(given.encode(), settings.token.encode()):
                    raise BadRequest(f"a write needs the token railab ui printed ({TOKEN_HEADER} header "
                                     "or token query parameter): nothing was changed", 403)
            return await handler(request)
        except BadRequest as err:
            return _json({"error": str(err)}, err.status)
        except (RailabError, ValueError, KeyError) as err:
            # refused by the agent or by the CLI's own checks: the request, not the server
            return _json({"error": str(err).strip("'\"")}, 400)
        except web.HTTPException as err:
            if err.status >= 400:
                return _json({"error": err.reason}, err.status)
            raise
        except Exception as err:      # a bug of ours: said as JSON, logged in full
            log.exception("%s %s", request.method, request.path)
            return _json({"error": f"internal error: {type(err).__name__}: {err}"}, 500)

    def feed_of(lab: str, spec) -> Feed:
        feed = feeds.get(lab)
        if feed is None or feed.task is None:     # (re)made when idle: the lab may be new
            links = layout_mod.layout(spec)["links"]
            feed = Feed(lab, spec, settings.interval_s, links, live.plan(links))
            feeds[lab] = feed
        return feed

    async def page(request):
        return web.FileResponse(STATIC / ("lab.html" if "lab" in request.match_info else "index.html"))

    async def info(request):
        given = request.query.get("token", "")
        return _json({"read_only": settings.read_only, "modes": list(MODES), "faults": list(validate.UI_FAULTS),
                      "interval_s": settings.interval_s,
                      "token_ok": hmac.compare_digest(given.encode(), settings.token.encode())})

    async def labs(request):
        out = []
        for name in state.known_labs():
            current = state.load(name)
            if current is None:
                continue
            spec = current.spec
            out.append({"name": name, "status": current.status, "kind": spec.kind, "runtime": spec.runtime,
                        "source": spec.source, "nodes": len(spec.nodes), "switches": len(spec.switches),
                        "links": sum(1 for _ in spec.links())})
        return _json(out)

    async def lab_layout(request):
        return _json(layout_mod.layout(_lab_state(request.match_info["lab"]).spec))

    async def load(request):
        lab = request.match_info["lab"]
        feed = feed_of(lab, _lab_state(lab).spec)
        feed.ensure_running()
        try:
            await asyncio.wait_for(feed.ready.wait(), timeout=settings.interval_s * 4 + 10)
        except asyncio.TimeoutError:
            raise BadRequest(f"lab {lab}: no counters from its agent yet", 503) from None
        return _json(live.named(feed.links, feed.latest))

    async def switch(request):
        lab, name = request.match_info["lab"], request.match_info["switch"]
        spec = _lab_state(lab).spec
        if name not in {n.name for n in spec.switches}:
            raise BadRequest(f"lab {lab} has no switch {name!r}", 404)

        def detail():
            before, t0 = ports.poll(lab, name)
            time.sleep(min(settings.interval_s, 0.5))
            after, t1 = ports.poll(lab, name)
            rows = ports.compute_rows(before, after, t1 - t0, spec)
            return live.switch_detail(name, rows, after, Fabric(lab).show()["switches"].get(name))
        return _json(await _blocking(detail))

    async def lb_show(request):
        lab = request.match_info["lab"]
        _lab_state(lab)
        return _json(await _blocking(Fabric(lab).show))

    async def fault_status(request):
        lab = request.match_info["lab"]
        _lab_state(lab)
        return _json(await _blocking(faults.status, lab))

    async def experiments(request):
        return _json(sorted(runs.experiment_files(settings.experiments)))

    async def run_status(request):
        lab = request.match_info["lab"]
        _lab_state(lab)
        return _json(await _blocking(runs.status, lab))

    async def run_plot(request):
        lab = request.match_info["lab"]
        _lab_state(lab)
        path = await _blocking(runs.plot_path, lab, request.match_info["name"])
        return web.FileResponse(path)

    def lock(lab: str) -> asyncio.Lock:
        return locks.setdefault(lab, asyncio.Lock())

    async def lb_set(request):
        lab = request.match_info["lab"]
        spec = _lab_state(lab).spec
        args = validate.lb_request(await _body(request), spec)
        async with lock(lab):
            return _json(await _blocking(Fabric(lab).set_mode, args.pop("mode"), **args))

    async def fault(request):
        lab = request.match_info["lab"]
        spec = _lab_state(lab).spec
        event = validate.fault_request(await _body(request), spec)
        async with lock(lab):
            return _json(await _blocking(faults.apply, lab, event))

    async def run_start(request):
        lab = request.match_info["lab"]
        _lab_state(lab)
        files = runs.experiment_files(settings.experiments)
        name = validate.run_request(await _body(request), files)
        async with lock(lab):
            return _json(await _blocking(runs.start, lab, name, files[name], settings.results))

    async def run_stop(request):
        lab = request.match_info["lab"]
        _lab_state(lab)
        return _json(await _blocking(runs.stop, lab))

    async def websocket(request):
        lab = request.match_info["lab"]
        feed = feed_of(lab, _lab_state(lab).spec)
        ws = web.WebSocketResponse(heartbeat=30)
        await ws.prepare(request)
        feed.subscribers.add(ws)
        feed.ensure_running()
        try:
            async for msg in ws:        # the page sends nothing; this waits for it to leave
                if msg.type == WSMsgType.ERROR:
                    break
        finally:
            feed.subscribers.discard(ws)
            feed.last_use = time.monotonic()
        return ws

    async def shutdown(app):
        for feed in feeds.values():
            for ws in list(feed.subscribers):
                await ws.close()
            if feed.task is not None:
                feed.task.cancel()

    app = web.Application(middlewares=[guard], client_max_size=64 * 1024)
    app.on_shutdown.append(shutdown)
    app.add_routes([
        web.get("/", page),
        web.get("/lab/{lab}", page),
        web.static("/static", STATIC),
        web.get("/api/info", info),
        web.get("/api/experiments", experiments),
        web.get("/api/labs", labs),
        web.get("/api/labs/{lab}/layout", lab_layout),
        web.get("/api/labs/{lab}/load", load),
        web.get("/api/labs/{lab}/switches/{switch}", switch),
        web.get("/api/labs/{lab}/lb", lb_show),
        web.get("/api/labs/{lab}/faults", fault_status),
        web.get("/api/labs/{lab}/run", run_status),
        web.get("/api/labs/{lab}/run/plots/{name}", run_plot),
        web.get("/api/labs/{lab}/ws", websocket),
        web.post("/api/labs/{lab}/lb", lb_set),
        web.post("/api/labs/{lab}/fault", fault),
        web.post("/api/labs/{lab}/run", run_start),
        web.post("/api/labs/{lab}/run/stop", run_stop),
    ])
    return app


def loopback_names(bind: str) -> set[str] | None:
    """Host names a loopback-bound server answers to; None (any) for other binds."""
    try:
        if not ipaddress.ip_address(bind).is_loopback:
            return None
    except ValueError:
        if bind != "localhost":
            return None
    return {"127.0.0.1", "localhost", "::1", bind}
