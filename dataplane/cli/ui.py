"""`railab ui [LAB] [--port 8080] [--bind 127.0.0.1] [--read-only]`: the web view of the
deployed labs (dataplane/ui). Prints the address with the write token and serves until
Ctrl-C."""
from __future__ import annotations

import asyncio
import math
import secrets
import signal
import sys
from pathlib import Path

from dataplane.cli.common import single_lab
from dataplane.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def register(sub) -> None:
    p = sub.add_parser("ui", help="web view of running labs: live link loads, modes, faults, experiments")
    p.add_argument("lab", nargs="?", help="open this lab's page (default: the list of labs)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080; 0 = any free port)")
    p.add_argument("--bind", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; another than loopback needs --allow-remote)")
    p.add_argument("--allow-remote", action="store_true",
                   help="let --bind take an address other machines reach (the token is then all that "
                        "guards the labs, sent in clear over HTTP)")
    p.add_argument("--read-only", action="store_true", help="refuse every write (modes, faults, runs)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between updates (default 0.5)")
    p.add_argument("--experiments", type=Path, default=None,
                   help="folder of experiment files the page can start (default: ./experiments, "
                        "else railab's own)")
    p.add_argument("--results", type=Path, default=Path("results"),
                   help="where started experiments write their results (default ./results)")
    p.set_defaults(func=run)


def run(args) -> int:
    # aiohttp is imported only by this verb (it is not needed by the others)
    from aiohttp import web

    from dataplane.ui.server import Settings, loopback_names, make_app

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: must be 0 .. 65535")
    if not (math.isfinite(args.interval) and 0.05 <= args.interval <= 60):
        raise UsageError(f"--interval {args.interval}: must be between 0.05 and 60 seconds")
    remote = loopback_names(args.bind) is None
    if remote and not args.allow_remote:
        raise UsageError(f"--bind {args.bind}: not a loopback address; other machines could reach the "
                         "labs' controls: add --allow-remote to mean it")
    lab = single_lab(args.lab) if args.lab else None
    experiments = args.experiments or next(
        (p for p in (Path("experiments"), ROOT / "experiments") if p.is_dir()), Path("experiments"))
    if args.experiments is not None and not experiments.is_dir():
        raise UsageError(f"--experiments {experiments}: not a folder")
    settings = Settings(token=secrets.token_urlsafe(18), read_only=args.read_only,
                        interval_s=args.interval, experiments=experiments, results=args.results,
                        allowed_hosts=loopback_names(args.bind))
    app = make_app(settings)

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, args.bind, args.port)
            try:
                await site.start()
            except OSError as err:
                raise UsageError(f"--bind {args.bind} --port {args.port}: {err.strerror or err}") from None
            port = runner.addresses[0][1]
            host = f"[{args.bind}]" if ":" in args.bind else args.bind
            path = f"/lab/{lab}" if lab else "/"
            mode = "read-only" if args.read_only else f"token {settings.token}"
            print(f"railab ui: http://{host}:{port}{path}" + ("" if args.read_only else f"?token={settings.token}"),
                  flush=True)
            if remote:
                print(f"railab ui: warning: serving on {args.bind}, reachable from other machines; "
                      "anyone with the token can change the labs (HTTP, no encryption)",
                      file=sys.stderr, flush=True)
            print(f"railab ui: {mode}; Ctrl-C stops the server (experiments it started keep running)",
                  flush=True)
            # Ctrl-C and SIGTERM end the wait, then the runner closes sockets and feeds; set
            # here also because a shell's background job starts with SIGINT ignored
            stop = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(sig, stop.set)
            await stop.wait()
            print("railab ui: stopped", file=sys.stderr)
        finally:
            await runner.cleanup()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:          # before the handlers were in place
        print("railab ui: stopped", file=sys.stderr)
    return 0
