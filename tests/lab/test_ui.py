"""railab ui against a real deployed lab: a browser (headless Chromium) sees every node and
link of the shipped rail-optimized lab, the links' colours change when an experiment
started from the page sends traffic, a link clicked down is drawn down and `railab fault
status` agrees, leaves switched to spray-rr on the page are what `railab lb show` says;
writes without the token and every write of a read-only server are refused (403) and
change nothing."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from dataplane.ui import runs

from .conftest import LABS, ROOT, lab_fixture, railab, wait_for
from .uibrowser import chromium, http, ui_server

SCREENSHOT_COPY = os.environ.get("RAILAB_UI_SCREENSHOT")   # e.g. docs/ui.png (README's picture)
UPLINK = ("spine1:down1", "leaf1-r0:up1")


lab = lab_fixture("rail-optimized", "ui")


@pytest.fixture
def experiments(tmp_path):
    """A folder with one short experiment on the shipped lab: ECMP only, elephants that cross
    the spines onto 2 Mb/s emulated ports (as experiments/classroom.yml)."""
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "ui-traffic.yml").write_text(
        f"name: ui-traffic\nlab: {LABS / 'rail-optimized' / 'rail-optimized.clab.yml'}\nduration: 8s\n"
        f"modes: [ecmp]\nworkload: {ROOT / 'experiments' / 'elephants.yml'}\n"
        "port_model: {scale: 0.000005, buffer_bytes: 16384, ecn_bytes: 4096}\n")
    return folder


def lb_modes(lab: str) -> dict[str, set]:
    shown = json.loads(railab("lb", "show", lab, "--json").stdout)
    return {name: {g["mode"] for g in sw["groups"].values()} for name, sw in shown["switches"].items()}


def faults_recorded(lab: str) -> dict:
    return json.loads(railab("fault", lab, "status", "--json").stdout)["faults"]


def until(what: str, check, timeout: float = 60.0) -> None:
    assert wait_for(check, timeout), f"timed out after {timeout:g} s waiting for {what}"


def page_links(driver) -> dict[str, dict]:
    return driver.execute_script("""
        const out = {};
        for (const g of document.querySelectorAll('#fabric g.link'))
          out[g.dataset.id] = {a: g.dataset.a, b: g.dataset.b, state: g.dataset.state,
                               down: g.querySelector('line.down').getAttribute('stroke'),
                               up: g.querySelector('line.up').getAttribute('stroke'),
                               bps: (+g.dataset.down || 0) + (+g.dataset.up || 0)};
        return out;""")


def click_on_link(driver, link_id: str) -> None:
    """A real mouse click on the link's line, near its upper end where few lines cross."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    point = driver.execute_script("""
        const g = [...document.querySelectorAll('#fabric g.link')].find(x => x.dataset.id === arguments[0]);
        const hit = g.querySelector('line.hit'), svg = document.getElementById('fabric');
        const m = svg.getScreenCTM(), f = 0.12, p = svg.createSVGPoint();
        p.x = +hit.getAttribute('x1') + f * (hit.getAttribute('x2') - hit.getAttribute('x1'));
        p.y = +hit.getAttribute('y1') + f * (hit.getAttribute('y2') - hit.getAttribute('y1'));
        const s = p.matrixTransform(m), box = svg.getBoundingClientRect();
        return [s.x - (box.left + box.width / 2), s.y - (box.top + box.height / 2)];""", link_id)
    svg = driver.find_element(By.ID, "fabric")
    ActionChains(driver).move_to_element_with_offset(svg, round(point[0]), round(point[1])).click().perform()


def test_page_draws_runs_and_controls_the_lab(lab, experiments, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with ui_server(lab.name, "--experiments", str(experiments), "--results", str(tmp_path / "results")) as \
            (base, url, token), chromium() as driver:
        driver.get(url)
        until("the first update", lambda: driver.find_element(By.ID, "tick").text)
        assert driver.find_element(By.ID, "access").text == "controls enabled"

        # the drawing: every node and every link of the lab, once
        nodes = driver.execute_script(
            "return [...document.querySelectorAll('#fabric g.node')].map(g => g.dataset.name)")
        assert sorted(nodes) == sorted(n.name for n in lab.nodes)
        links = page_links(driver)
        want = {frozenset((f"{n.name}:{i.name}", f"{p.name}:{j.name}")) for n, i, p, j in lab.links()}
        assert len(links) == len(want) == 64
        assert {frozenset((l["a"], l["b"])) for l in links.values()} == want

        # traffic: the experiment started from the page; the links it loads change colour
        before = page_links(driver)
        Select(driver.find_element(By.ID, "experiment")).select_by_value("ui-traffic.yml")
        driver.find_element(By.ID, "run-start").click()
        uplinks = [i for i, l in before.items() if l["a"].startswith("spine")]

        changed: list = []

        def recoloured():
            now = page_links(driver)
            changed[:] = [i for i in uplinks if now[i]["bps"] > 0 and
                          (now[i]["down"], now[i]["up"]) != (before[i]["down"], before[i]["up"])]
            return len(changed) >= 8                          # 8 elephants cross the spines
        until("uplinks recoloured by the traffic", recoloured, timeout=90)
        assert all(before[i]["bps"] == 0 for i in changed)
        shot = tmp_path / "ui.png"          # the fabric under load: the README's picture
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        if SCREENSHOT_COPY:
            shutil.copy(shot, ROOT / SCREENSHOT_COPY)

        # a link clicked down on the page: drawn down, and railab fault status agrees
        link_id = next(i for i, l in links.items() if (l["a"], l["b"]) == UPLINK)
        click_on_link(driver, link_id)
        until("the link selected", lambda: UPLINK[0] in driver.execute_script(
            "return document.getElementById('selected-link')?.textContent || ''"))
        driver.find_element(By.ID, "link-down").click()
        until("the link drawn down", lambda: page_links(driver)[link_id]["state"] == "down")
        assert faults_recorded(lab.name)["links_down"] in ([UPLINK[0]], [UPLINK[1]])
        assert [i for i, l in page_links(driver).items() if l["state"] != "up"] == [link_id]
        driver.save_screenshot(str(tmp_path / "ui-link-down.png"))
        driver.find_element(By.ID, "link-up").click()
        until("the link drawn up", lambda: page_links(driver)[link_id]["state"] == "up")
        assert faults_recorded(lab.name)["links_down"] == []

        # a switch's panel: its groups' modes, per-port queue, drops and ECN marks
        driver.find_element(By.CSS_SELECTOR, "#fabric g.node[data-name='leaf1-r0'] rect").click()
        until("the switch panel", lambda: "ecmp" in driver.find_element(By.ID, "selected").text)
        panel = driver.find_element(By.ID, "selected").text
        assert "queue B" in panel and "ECN" in panel and "up1→spine1:down1" in panel

        # the experiment's report, when it ends: its table and its plots
        until("the experiment's report", lambda: driver.find_element(By.ID, "run-state").get_attribute("data-state")
                 in ("done", "failed"), timeout=240)
        assert driver.find_element(By.ID, "run-state").get_attribute("data-state") == "done", \
            driver.find_element(By.ID, "run-state").text
        assert "ecmp" in driver.find_element(By.ID, "run-table").text
        until("the plots loaded", lambda: driver.execute_script(
            "const i = [...document.querySelectorAll('#run-plots img')];"
            "return i.length > 0 && i.every(x => x.complete && x.naturalWidth > 0)"))

        # leaves to spray-rr from the page: railab lb show agrees, spines keep their mode
        Select(driver.find_element(By.ID, "mode-leaf")).select_by_value("spray-rr")
        driver.find_element(By.ID, "mode-apply-leaf").click()
        until("every leaf drawn in spray-rr", lambda: driver.execute_script(
            "return [...document.querySelectorAll('#fabric g.node.leaf')].every(g => g.dataset.modes === 'spray-rr')"))
        modes = lb_modes(lab.name)
        assert all(modes[n.name] == {"spray-rr"} for n in lab.switches if n.role == "leaf")
        assert all(modes[n.name] == {"ecmp"} for n in lab.switches if n.role == "spine")
        railab("lb", "set", lab.name, "--role", "leaf", "--mode", "ecmp")


def test_writes_need_the_token_and_read_only_refuses_all(lab):
    before_modes, before_faults = lb_modes(lab.name), faults_recorded(lab.name)
    before_run = runs.status(lab.name)
    spray = {"mode": "spray-rr", "role": "leaf"}
    cut = {"fault": "link-down", "a": UPLINK[0]}
    with ui_server(lab.name) as (base, url, token):
        api = f"{base}/api/labs/{lab.name}"
        for path, body in (("lb", spray), ("fault", cut), ("run", {"experiment": "classroom.yml"})):
            for given in (None, "not-the-token"):
                status, reply = http("POST", f"{api}/{path}", body, token=given)
                assert status == 403 and "token" in reply["error"]
        status, reply = http("POST", f"{api}/lb", {"mode": "spray-rx", "role": "leaf"}, token=token)
        assert status == 400 and "spray-rx" in reply["error"]
        status, reply = http("POST", f"{api}/fault", {"fault": "link-down", "a": "spine1:nope"}, token=token)
        assert status == 400 and "spine1:nope" in reply["error"]
        status, reply = http("GET", f"{api}/run")
        assert status == 200 and reply == json.loads(json.dumps(before_run))
    assert lb_modes(lab.name) == before_modes and faults_recorded(lab.name) == before_faults
    with ui_server(lab.name, "--read-only") as (base, url, token):
        assert token == ""
        api = f"{base}/api/labs/{lab.name}"
        for path, body in (("lb", spray), ("fault", cut), ("fault", {"fault": "clear"}),
                           ("run", {"experiment": "classroom.yml"}), ("run/stop", {})):
            status, reply = http("POST", f"{api}/{path}", body, token="anything")
            assert status == 403 and "read-only" in reply["error"]
        status, reply = http("GET", f"{api}/load")
        assert status == 200 and len(reply["links"]) == 64        # reads still work
    assert lb_modes(lab.name) == before_modes and faults_recorded(lab.name) == before_faults
    assert runs.status(lab.name) == before_run
