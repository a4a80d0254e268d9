"use strict";
(async () => {
  try {
    const labs = await api("/api/labs");
    const body = document.querySelector("#labs tbody");
    for (const lab of labs) {
      const row = el("tr");
      const cell = el("td");
      cell.appendChild(el("a", {href: "/lab/" + encodeURIComponent(lab.name)}, lab.name));
      row.appendChild(cell);
      for (const k of ["status", "kind", "runtime", "nodes", "switches", "links", "source"])
        row.appendChild(el("td", {}, String(lab[k] ?? "-")));
      body.appendChild(row);
    }
    if (!labs.length) say("no lab is deployed (railab deploy FILE)");
  } catch (err) { say(err.message, true); }
})();
