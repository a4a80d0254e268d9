// One lab's page: draws the layout (GET /api/labs/LAB/layout) as SVG, recolours every link
// direction on each WebSocket update, and sends the controls as POSTs with the token.
"use strict";
const LAB = decodeURIComponent(location.pathname.split("/").pop());
const SVG = "http://www.w3.org/2000/svg";
const OFFSET = 1.8;              // the two directions of a link drawn side by side
let LAYOUT = null, INFO = null, selected = null, lastUpdate = null;
const linkEls = [];              // layout order, as the updates
const nodeEls = {};

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

// Idle (nothing sent) is grey; any traffic is coloured, green (low) to red (full port).
function loadColour(util, bps) {
  if (!bps) return "#c4c4c4";
  const u = Math.max(0, Math.min(util, 1));
  return `hsl(${Math.round(120 * (1 - u))}, 85%, ${Math.round(42 - 6 * u)}%)`;
}
function loadWidth(util, bps) {
  return bps ? (1.6 + 4.4 * Math.min(util, 1)).toFixed(2) : "1";
}

function draw(layout) {
  const root = document.getElementById("fabric");
  root.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
  root.replaceChildren();
  const links = svg("g", {id: "links"}), nodes = svg("g", {id: "nodes"});
  root.append(links, nodes);
  for (const link of layout.links) {
    const dx = link.bx - link.ax, dy = link.by - link.ay, len = Math.hypot(dx, dy) || 1;
    const ox = -dy / len * OFFSET, oy = dx / len * OFFSET;
    const g = svg("g", {class: "link", "data-id": link.id, "data-a": link.a, "data-b": link.b, "data-state": "up"});
    const down = svg("line", {class: "dir down", x1: link.ax + ox, y1: link.ay + oy, x2: link.bx + ox, y2: link.by + oy,
                              stroke: loadColour(0, 0), "stroke-width": 1});
    const up = svg("line", {class: "dir up", x1: link.ax - ox, y1: link.ay - oy, x2: link.bx - ox, y2: link.by - oy,
                            stroke: loadColour(0, 0), "stroke-width": 1});
    const hit = svg("line", {class: "hit", x1: link.ax, y1: link.ay, x2: link.bx, y2: link.by});
    const title = svg("title");
    title.textContent = link.id;
    g.append(down, up, hit, title);
    g.addEventListener("click", () => select({link}));
    links.appendChild(g);
    linkEls.push({g, down, up, title, link});
  }
  for (const node of layout.nodes) {
    const g = svg("g", {class: `node ${node.role}`, "data-name": node.name, "data-role": node.role});
    g.appendChild(svg("rect", {x: node.x, y: node.y, width: node.w, height: node.h}));
    const name = svg("text", {x: node.x + node.w / 2, y: node.y + (node.role === "host" ? 17 : 12)});
    name.textContent = node.name;
    g.appendChild(name);
    const title = svg("title");
    title.textContent = node.name;
    g.appendChild(title);
    if (node.role !== "host") {
      const mode = svg("text", {class: "mode", x: node.x + node.w / 2, y: node.y + 23});
      g.appendChild(mode);
      g.addEventListener("click", () => select({switch: node.name}));
    }
    nodes.appendChild(g);
    nodeEls[node.name] = g;
  }
  const legend = document.getElementById("legend");
  legend.replaceChildren(el("span", {}, "each link: two lines, down (upper end sends) and up; colour = utilisation of the emulated port:"));
  for (const u of [0, 0.25, 0.5, 0.75, 1]) {
    const s = el("span");
    s.appendChild(el("span", {class: "swatch", style: `background:${loadColour(u, u ? 1 : 0)}`}));
    s.append(u ? ` ${u * 100}%` : " idle");
    legend.appendChild(s);
  }
  legend.appendChild(el("span", {}, "· dashed red: down · dotted purple: paused (PFC)"));
}

const STATES = ["up", "down", "paused"];

function update(msg) {
  if (msg.error) { say(msg.error, true); return; }
  lastUpdate = msg;
  msg.links.forEach((v, i) => {
    const [du, uu, dbps, ubps, state] = v;
    const e = linkEls[i];
    e.down.setAttribute("stroke", loadColour(du, dbps));
    e.down.setAttribute("stroke-width", loadWidth(du, dbps));
    e.up.setAttribute("stroke", loadColour(uu, ubps));
    e.up.setAttribute("stroke-width", loadWidth(uu, ubps));
    e.g.dataset.state = STATES[state];
    e.g.dataset.down = dbps; e.g.dataset.up = ubps;
    e.title.textContent = `${e.link.id}\ndown ${fmtBps(dbps)} (${(du * 100).toFixed(1)}%)\n` +
                          `up ${fmtBps(ubps)} (${(uu * 100).toFixed(1)}%)\n${STATES[state]}`;
  });
  const downSwitches = new Set((msg.faults || {}).switches_down || []);
  for (const [name, s] of Object.entries(msg.switches)) {
    const g = nodeEls[name];
    if (!g) continue;
    g.querySelector("text.mode").textContent = (s.modes || []).join(",");
    g.dataset.modes = (s.modes || []).join(",");
    g.classList.toggle("dropping", s.drops_per_s > 0);
    g.classList.toggle("down", downSwitches.has(name));
    g.querySelector("title").textContent = `${name}: ${(s.modes || []).join(", ")}\nqueue ${s.queue_bytes} B\n` +
      `drops ${s.drops_per_s}/s (${s.drops} total)\nECN marks ${s.ecn_per_s}/s (${s.ecn} total)`;
  }
  showFaults(msg.faults || {});
  document.getElementById("tick").textContent = "updated " + new Date(msg.t * 1000).toLocaleTimeString();
  if (selected && selected.link) showLink(selected.link);
}

function showFaults(f) {
  const parts = [];
  if ((f.links_down || []).length) parts.push("links down: " + f.links_down.join(", "));
  if ((f.switches_down || []).length) parts.push("switches down: " + f.switches_down.join(", "));
  if (Object.keys(f.degraded || {}).length) parts.push("degraded: " + Object.keys(f.degraded).join(", "));
  document.getElementById("faults").textContent = parts.join("; ") || "none";
}

function button(id, text, handler) {
  const b = el("button", {id}, text);
  b.disabled = !writable();
  b.addEventListener("click", handler);
  return b;
}

function writable() { return INFO && INFO.token_ok && !INFO.read_only; }

async function write(path, body, what) {
  try {
    const res = await api(`/api/labs/${encodeURIComponent(LAB)}/${path}`, body);
    say(`${what}: done`);
    return res;
  } catch (err) { say(`${what}: ${err.message}`, true); }
}

function select(item) {
  for (const e of document.querySelectorAll(".selected")) e.classList.remove("selected");
  selected = item;
  if (item.link) {
    linkEls.find(e => e.link.id === item.link.id).g.classList.add("selected");
    showLink(item.link);
  } else {
    nodeEls[item.switch].classList.add("selected");
    showSwitch(item.switch);
  }
}

function showLink(link) {
  // built once per selection; updates only rewrite its state line (buttons stay clickable)
  const box = document.getElementById("selected");
  const e = linkEls.find(x => x.link.id === link.id);
  const stateText = `state: ${e.g.dataset.state}; down ${fmtBps(+e.g.dataset.down || 0)}, ` +
                    `up ${fmtBps(+e.g.dataset.up || 0)}`;
  const current = document.getElementById("selected-link");
  if (current && current.dataset.id === link.id) {
    document.getElementById("selected-link-state").textContent = stateText;
    return;
  }
  box.replaceChildren(el("div", {id: "selected-link", "data-id": link.id}, `link ${link.a} — ${link.b}`));
  box.appendChild(el("div", {id: "selected-link-state"}, stateText));
  box.appendChild(button("link-down", "take link down", () => write("fault", {fault: "link-down", a: link.a}, "link down")));
  box.appendChild(button("link-up", "bring link up", () => write("fault", {fault: "link-up", a: link.a}, "link up")));
}

async function showSwitch(name) {
  const box = document.getElementById("selected");
  box.replaceChildren(el("div", {id: "selected-switch"}, `switch ${name}`));
  box.appendChild(button("switch-down", "switch down", () => write("fault", {fault: "switch-down", switch: name}, "switch down")));
  box.appendChild(button("switch-up", "switch up", () => write("fault", {fault: "switch-up", switch: name}, "switch up")));
  try {
    const d = await api(`/api/labs/${encodeURIComponent(LAB)}/switches/${encodeURIComponent(name)}`);
    if (!selected || selected.switch !== name) return;
    const groups = el("table");
    groups.appendChild(tr(["group", "mode", "members"], "th"));
    for (const [gid, g] of Object.entries(d.groups)) groups.appendChild(tr([gid, g.mode, g.members.join(" ")]));
    const ports = el("table");
    ports.appendChild(tr(["port", "tx", "rx", "queue B", "drops", "ECN"], "th"));
    for (const [p, c] of Object.entries(d.ports)) {
      const drops = Object.values(c.drops).reduce((a, b) => a + b, 0);
      ports.appendChild(tr([`${p}→${c.peer}`, fmtBps(c.tx_bps), fmtBps(c.rx_bps), c.queue_bytes ?? "-", drops, c.ecn_marked]));
    }
    box.append(groups, ports);
  } catch (err) { say(err.message, true); }
}

function tr(cells, tag = "td") {
  const row = el("tr");
  for (const c of cells) row.appendChild(el(tag, {}, String(c)));
  return row;
}

function modeControls() {
  const box = document.getElementById("modes");
  const roles = [...new Set(LAYOUT.nodes.filter(n => n.role !== "host").map(n => n.role))];
  for (const role of roles) {
    const select = el("select", {id: `mode-${role}`});
    for (const m of INFO.modes) select.appendChild(el("option", {value: m}, m));
    const line = el("div", {}, `${role === "leaf" ? "leaves" : role + "s"}: `);
    line.append(select, button(`mode-apply-${role}`, "apply",
      () => write("lb", {mode: select.value, role}, `${role} to ${select.value}`)));
    box.appendChild(line);
  }
}

async function runControls() {
  const chooser = document.getElementById("experiment");
  for (const name of await api("/api/experiments")) chooser.appendChild(el("option", {value: name}, name));
  for (const [id, path, body] of [["run-start", "run", () => ({experiment: chooser.value})],
                                  ["run-stop", "run/stop", () => ({})]]) {
    const b = document.getElementById(id);
    b.disabled = !writable();
    b.addEventListener("click", async () => { await write(path, body(), id.replace("-", " ")); pollRun(); });
  }
  pollRun();
}

let runTimer = null;
async function pollRun() {
  clearTimeout(runTimer);
  try {
    const r = await api(`/api/labs/${encodeURIComponent(LAB)}/run`);
    const stateEl = document.getElementById("run-state");
    stateEl.dataset.state = r.state;
    stateEl.textContent = r.state === "none" ? "no experiment started here" : `${r.experiment}: ${r.state}` +
      (r.error ? ` (${r.error})` : "");
    document.getElementById("run-table").textContent = r.table || "";
    const plots = document.getElementById("run-plots");
    plots.replaceChildren(...(r.plots || []).map(p => el("img", {
      src: `/api/labs/${encodeURIComponent(LAB)}/run/plots/${encodeURIComponent(p)}?t=${r.started}`,
      alt: p, style: "width:100%"})));
    if (r.state === "running") runTimer = setTimeout(pollRun, 2000);
  } catch (err) { say(err.message, true); }
}

function connect() {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}` +
                           `/api/labs/${encodeURIComponent(LAB)}/ws`);
  ws.onmessage = ev => update(JSON.parse(ev.data));
  ws.onclose = () => { say("connection lost; reconnecting", true); setTimeout(connect, 2000); };
  ws.onopen = () => say("");
}

(async () => {
  document.getElementById("title").textContent = `railab: ${LAB}`;
  document.getElementById("home").href = "/";
  try {
    INFO = await api("/api/info?token=" + encodeURIComponent(TOKEN));
    LAYOUT = await api(`/api/labs/${encodeURIComponent(LAB)}/layout`);
  } catch (err) { say(err.message, true); return; }
  document.getElementById("access").textContent = INFO.read_only ? "read-only server" :
    (INFO.token_ok ? "controls enabled" : "view only (open the address with ?token= that railab ui printed)");
  draw(LAYOUT);
  document.body.dataset.links = LAYOUT.links.length;
  document.body.dataset.nodes = LAYOUT.nodes.length;
  modeControls();
  document.getElementById("faults-clear").disabled = !writable();
  document.getElementById("faults-clear").addEventListener("click", () => write("fault", {fault: "clear"}, "clear"));
  await runControls();
  connect();
})();
