"""Helpers of the railab ui tests: the server as its own process (always stopped, by
SIGINT as Ctrl-C would) and a headless Chromium driven by Selenium (always quit)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request

import pytest

from .conftest import RAILAB, ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextlib.contextmanager
def ui_server(lab: str, *extra: str):
    """`railab ui LAB --port 0 ...`; yields (base URL, page URL, token). Stopped with SIGINT
    at the end, whatever happened; a server that does not exit cleanly fails the test."""
    proc = subprocess.Popen([*RAILAB, "ui", lab, "--port", "0", *extra], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = proc.stdout.readline().strip()
        assert first.startswith("railab ui: http://"), f"railab ui did not start: {first} {proc.stderr.read()}"
        url = first.split()[2]
        token = url.split("token=")[1] if "token=" in url else ""
        yield url.split("/lab/")[0], url, token
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AssertionError("railab ui did not stop within 20 s of SIGINT")
    assert proc.returncode == 0 and "railab ui: stopped" in err, (proc.returncode, err)


def http(method: str, url: str, body=None, token: str | None = None) -> tuple[int, dict]:
    """(status, JSON reply) of one request."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        req.add_header("X-Railab-Token", token)
    try:
        with urllib.request.urlopen(req, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def browser_missing() -> str | None:
    """What this machine lacks to run the browser test (None: nothing)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "python3-selenium"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(path):
            return os.path.basename(path)
    return None


@contextlib.contextmanager
def chromium(width: int = 1500, height: int = 900):
    missing = browser_missing()
    if missing:
        if os.environ.get("CI"):
            raise AssertionError(f"the browser test needs {missing} in CI (scripts/setup.sh installs it)")
        pytest.skip(f"needs {missing} (scripts/setup.sh installs it)")
    # Selenium is heavy and only this test drives a browser: imported here on purpose
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    # --no-sandbox: Chromium refuses to run as root (CI runs the lab tests as root) with it
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
