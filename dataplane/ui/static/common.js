// Shared by both pages: the write token (from ?token=, kept for this tab), JSON calls.
"use strict";
const params = new URLSearchParams(location.search);
if (params.get("token")) sessionStorage.setItem("railab-token", params.get("token"));
const TOKEN = sessionStorage.getItem("railab-token") || "";

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json", "X-Railab-Token": TOKEN}};
  const reply = await fetch(path, init);
  const data = await reply.json().catch(() => ({error: reply.statusText}));
  if (!reply.ok) throw new Error(data.error || reply.statusText);
  return data;
}

function say(text, error) {
  const el = document.getElementById("message");
  el.textContent = text;
  el.className = error ? "error" : "";
}

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmtBps(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(2) + " Gb/s";
  if (v >= 1e6) return (v / 1e6).toFixed(2) + " Mb/s";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + " kb/s";
  return Math.round(v) + " b/s";
}
