// jet console: vanilla JS, no build step. Pages are routed on the URL hash:
//   #/cluster  #/streams  #/partition/STREAM/P  #/table/STREAM  #/groups  #/plots
// Every figure comes from the console's JSON endpoints (/api/...).
"use strict";

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f"];
let config = { allow_writes: false };
let timer = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const fmt = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
const rate = (n) => (n === null || n === undefined ? "-" : Math.round(n).toLocaleString("en-US"));

async function api(path, options) {
  const res = await fetch(path, options);
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

async function write(method, path, body) {
  return api(path, {
    method,
    headers: { "Content-Type": "application/json", "X-Jet-Console": "1" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

function table(headers, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

function setMain(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes);
}

function status(text, isError) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = "status" + (isError ? " error" : "");
}

// -- cluster -------------------------------------------------------------------------------

async function pageCluster() {
  const c = await api("/api/cluster");
  return [
    el("h2", {}, "Cluster"),
    el("div", { class: "cards" },
      card("Metadata leader", el("span", { id: "metadata-leader" }, c.metadata_leader || "none")),
      card("Servers up", el("span", { id: "servers-up" }, `${c.servers.filter((s) => s.up).length}/${c.servers.length}`)),
      card("Streams", el("span", { id: "stream-count" }, c.streams)),
      card("Partitions", el("span", { id: "partition-count" }, c.partitions)),
      card("Offline", el("span", { id: "offline-count", class: c.offline ? "bad" : null }, c.offline)),
      card("Under-replicated", el("span", { id: "under-replicated", class: c.under_replicated ? "bad" : null }, c.under_replicated)),
      card("Internal partitions", el("span", { id: "internal-partitions", class: c.internal_offline || c.internal_under_replicated ? "bad" : null },
        `${c.internal_partitions}`, el("small", {}, ` (${c.internal_offline} offline, ${c.internal_under_replicated} under-replicated)`))),
      card("Consumer groups", el("span", { id: "group-count" }, c.groups))),
    table(["Server", "Address", "Status", "Role"], c.servers.map((s) =>
      el("tr", { "data-server": s.id },
        el("td", {}, s.id), el("td", {}, s.address),
        el("td", { class: s.up ? "up" : "down", "data-up": s.up ? "true" : "false" }, s.up ? "up" : "DOWN"),
        el("td", {}, s.id === c.metadata_leader ? el("span", { class: "pill" }, "metadata leader") : ""))))];
}

function card(label, value) {
  return el("div", { class: "card" }, el("div", {}, label), el("div", { class: "big" }, value));
}

// -- streams -------------------------------------------------------------------------------

function retention(cfg) {
  const parts = [];
  for (const [k, v] of Object.entries(cfg || {})) {
    if (k.startsWith("retention") || k === "delete_retention") parts.push(`${k.replace("retention_", "")}=${v === null ? "none" : v}`);
  }
  return parts.join(" ") || "-";
}

const PARTITION_PAGE = 20;
// The streams page's filter and each stream's page of partitions (kept across refreshes).
const streamView = { filter: "", unhealthy: false, pages: {} };

function nameMatches(name, filter) {
  if (!filter) return true;
  if (!/[*?]/.test(filter)) return name.includes(filter);
  const re = filter.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".");
  return new RegExp(`^${re}$`).test(name);
}

function streamFilterForm() {
  const input = el("input", { id: "stream-filter", placeholder: "stream filter (text or glob)", value: streamView.filter });
  input.addEventListener("input", () => { streamView.filter = input.value; streamView.pages = {}; render(); });
  const bad = el("input", { id: "unhealthy-only", type: "checkbox", checked: streamView.unhealthy });
  bad.addEventListener("change", () => { streamView.unhealthy = bad.checked; streamView.pages = {}; render(); });
  return el("form", { class: "inline", id: "stream-filter-form", onsubmit: (ev) => ev.preventDefault() },
    "Filter", input, el("label", {}, bad, " only offline or under-replicated partitions"));
}

function pager(name, page, total) {
  const pages = Math.max(1, Math.ceil(total / PARTITION_PAGE));
  const go = (to) => { streamView.pages[name] = to; render(); };
  const first = total ? page * PARTITION_PAGE + 1 : 0, last = Math.min(total, (page + 1) * PARTITION_PAGE);
  return el("div", { class: "pager", "data-pager": name },
    el("span", { class: "rows" }, `partitions ${first}-${last} of ${total}`),
    el("button", { type: "button", class: "prev", disabled: page <= 0, onclick: () => go(page - 1) }, "‹ prev"),
    el("button", { type: "button", class: "next", disabled: page >= pages - 1, onclick: () => go(page + 1) }, "next ›"));
}

async function pageStreams() {
  const data = await api("/api/streams");
  const shown = data.streams.filter((s) => (!s.internal || location.hash.includes("all")) && nameMatches(s.name, streamView.filter));
  const nodes = [el("h2", {}, "Streams")];
  if (config.allow_writes) nodes.push(createForm());
  nodes.push(streamFilterForm());
  nodes.push(table(["Stream", "Subject", "Partitions", "Replicas", "Messages", "Size (bytes)", "Retention", ""],
    shown.map((s) => el("tr", { "data-stream": s.name },
      el("td", {}, s.name), el("td", {}, s.subject),
      el("td", { class: "num" }, s.partitions.length), el("td", { class: "num" }, s.replication_factor),
      el("td", { class: "num messages" + (s.offline ? " bad" : "") }, fmt(s.messages) + (s.offline ? ` + ? (${s.offline} offline)` : "")),
      el("td", { class: "num size" }, fmt(s.size_bytes) + (s.offline ? " + ?" : "")),
      el("td", { class: "retention" }, retention(s.config)),
      el("td", {}, s.compact ? el("a", { href: `#/table/${encodeURIComponent(s.name)}`, "data-table": s.name }, "table") : "", config.allow_writes ? [
        el("button", { onclick: () => editStream(s.name), "data-edit": s.name }, "Edit"),
        el("button", { onclick: () => purgeStream(s.name), "data-purge": s.name }, "Purge"),
        el("button", { onclick: () => deleteStream(s.name), "data-delete": s.name }, "Delete")] : "")))));
  for (const s of shown) {
    const rows = s.partition_rows.filter((p) => !streamView.unhealthy || p.under_replicated);
    if (streamView.unhealthy && !rows.length) continue;
    const pages = Math.max(1, Math.ceil(rows.length / PARTITION_PAGE));
    const page = Math.min(streamView.pages[s.name] || 0, pages - 1);
    nodes.push(el("h3", {}, `${s.name} — partitions`));
    if (rows.length > PARTITION_PAGE) nodes.push(pager(s.name, page, rows.length));
    nodes.push(table(["P", "Leader", "Replicas", "ISR", "HW", "LEO", "Log start", "Size", "In msg/s", "Out msg/s", "Replica lag", ""],
      rows.slice(page * PARTITION_PAGE, (page + 1) * PARTITION_PAGE).map((p) => el("tr", { "data-partition": `${p.stream}/${p.partition}`, "data-state": p.state,
          class: p.is_offline ? "under offline" : p.under_replicated ? "under" : null, title: p.offline_reason },
        el("td", { class: "num" }, p.partition),
        el("td", { class: "leader" }, p.is_offline ? `OFFLINE (${p.leader || "no leader"})` : p.leader || "NONE"),
        el("td", {}, p.replicas.join(",")),
        el("td", { class: "isr" }, p.isr.join(",") + (p.isr.length < p.replicas.length ? ` (${p.isr.length}/${p.replicas.length})` : "")),
        el("td", { class: "num hw" }, fmt(p.hw)), el("td", { class: "num leo" }, fmt(p.leo)),
        el("td", { class: "num log-start" }, fmt(p.log_start)), el("td", { class: "num size" }, fmt(p.size_bytes)),
        el("td", { class: "num in" }, rate(p.in_rate)), el("td", { class: "num out" }, rate(p.out_rate)),
        el("td", { class: "replica-lag" }, Object.entries(p.replica_lag).map(([r, v]) => `${r}:${v === null ? "?" : v}`).join(" ") || "-"),
        el("td", {}, el("a", { href: `#/partition/${encodeURIComponent(p.stream)}/${p.partition}` }, "browse"))))));
  }
  return nodes;
}

function createForm() {
  const name = el("input", { id: "new-name", placeholder: "name", required: true });
  const parts = el("input", { id: "new-partitions", type: "number", min: 1, value: 1, title: "partitions" });
  const rf = el("input", { id: "new-replicas", type: "number", min: 1, value: 1, title: "replication factor" });
  const msg = el("span", { id: "create-result" });
  return el("form", { class: "inline", id: "create-form", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      await write("POST", "/api/streams", { name: name.value, partitions: parts.value, replication_factor: rf.value });
      msg.textContent = `created ${name.value}`;
    } catch (e) { msg.textContent = e.message; msg.className = "error"; }
  } }, "New stream:", name, "partitions", parts, "replicas", rf, el("button", { type: "submit" }, "Create"), msg);
}

async function editStream(name) {
  const text = prompt(`New settings of ${name}: name=value, comma-separated ("none" lifts a limit), ` +
    "e.g. retention_max_messages=100000, retention_max_age=604800, retention_max_bytes=none", "");
  if (!text) return;
  const body = {};
  for (const part of text.split(",")) {
    const [k, v] = part.split("=").map((x) => x.trim());
    if (k) body[k] = v === undefined ? "" : v;
  }
  try { await write("POST", `/api/streams/${encodeURIComponent(name)}/settings`, body); render(); }
  catch (e) { status(e.message, true); }
}

async function purgeStream(name) {
  if (!confirm(`Purge every committed record of ${name}, on every replica?`)) return;
  try { await write("POST", `/api/streams/${encodeURIComponent(name)}/purge`, {}); render(); }
  catch (e) { status(e.message, true); }
}

async function deleteStream(name) {
  if (!confirm(`Delete stream ${name} and its data?`)) return;
  try { await write("DELETE", `/api/streams/${encodeURIComponent(name)}`); render(); }
  catch (e) { status(e.message, true); }
}

// -- a partition's records -----------------------------------------------------------------

function b64bytes(b64) {
  const bin = atob(b64 || "");
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function show(text, b64, mode) {
  if (b64 === null || b64 === undefined) return "∅";
  if (mode === "hex") return Array.from(b64bytes(b64), (b) => b.toString(16).padStart(2, "0")).join(" ");
  if (text === null) return "(binary) " + Array.from(b64bytes(b64), (b) => b.toString(16).padStart(2, "0")).join(" ");
  if (mode === "json") {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return text; }
  }
  return text;
}

async function pagePartition(stream, partition) {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  if (!stream) throw new Error("no stream named: the address is #/partition/STREAM/PARTITION");
  for (const name of ["offset", "limit"]) {
    const v = q.get(name);
    if (v !== null && v !== "" && !/^\d+$/.test(v)) throw new Error(`${name} must be a non-negative integer, not ${JSON.stringify(v)}`);
  }
  if (q.get("limit") === "0") throw new Error("limit must be at least 1");
  const offset = el("input", { id: "offset", type: "number", min: 0, placeholder: "offset", value: q.get("offset") || "" });
  const time = el("input", { id: "time", placeholder: "time (ISO-8601)", value: q.get("time") || "" });
  const limit = el("input", { id: "limit", type: "number", min: 1, max: 500, value: q.get("limit") || 50 });
  const mode = el("select", { id: "format" }, ["text", "json", "hex"].map((m) => el("option", { value: m, selected: q.get("format") === m }, m)));
  const key = el("input", { id: "search-key", placeholder: "key", value: q.get("key") || "" });
  const header = el("input", { id: "search-header", placeholder: "header name[=value]", value: q.get("header") || "" });
  const tail = el("input", { id: "tail", type: "checkbox", checked: q.get("tail") === "1" });
  const go = () => {
    const p = new URLSearchParams();
    if (offset.value !== "" && !tail.checked) p.set("offset", offset.value);
    if (time.value && !tail.checked) p.set("time", time.value);
    if (key.value) p.set("key", key.value);
    if (header.value) p.set("header", header.value);
    if (tail.checked) p.set("tail", "1");
    p.set("limit", limit.value); p.set("format", mode.value);
    location.hash = `#/partition/${encodeURIComponent(stream)}/${partition}?${p}`;
  };
  tail.addEventListener("change", go);
  const params = new URLSearchParams({ stream, partition, limit: limit.value });
  const tailing = q.get("tail") === "1";
  // A live tail shows the last records (the page refreshes each second); a search reads
  // from the offset or time given, else from the log start.
  if (q.get("offset") && !tailing) params.set("offset", q.get("offset"));
  if (q.get("time") && !tailing) params.set("time", q.get("time"));
  if (q.get("key")) params.set("key", q.get("key"));
  if (q.get("header")) params.set("header", q.get("header"));
  const data = await api(`/api/records?${params}`);
  const m = mode.value;
  const more = new URLSearchParams(q);
  more.set("offset", data.next); more.delete("time"); more.delete("tail");
  const range = data.search
    ? `searched offsets ${fmt(data.start)}–${fmt(data.next)} (${fmt(data.scanned)} records): ${data.records.length} match(es); log start ${fmt(data.log_start)}, high watermark ${fmt(data.hw)}`
    : `log start ${fmt(data.log_start)}, high watermark ${fmt(data.hw)}; showing from offset ${fmt(data.start)}` + (tailing ? " · live tail" : "");
  return [
    el("h2", {}, `${stream} / partition ${partition}`),
    el("p", { id: "range" }, range),
    el("form", { class: "inline", onsubmit: (ev) => { ev.preventDefault(); go(); } },
      "From offset", offset, "or time", time, "limit", limit, "as", mode, "search", key, header,
      el("label", {}, tail, " live tail"), el("button", { type: "submit", id: "load" }, "Show")),
    table(["Offset", "Time", "Subject", "Key", "Value", "Headers"], data.records.map((r) =>
      el("tr", { "data-offset": r.offset },
        el("td", { class: "num" }, r.offset), el("td", {}, r.time.replace("+00:00", "Z")),
        el("td", { class: "subject" }, r.subject),
        el("td", { class: "wrap key" }, show(r.key_text, r.key_b64, m)),
        el("td", { class: "wrap value" }, show(r.value_text, r.value_b64, m)),
        el("td", { class: "wrap headers" }, r.headers.map((h) => `${h.name}: ${show(h.value_text, h.value_b64, m === "hex" ? "hex" : "text")}`).join("\n"))))),
    config.allow_writes ? produceForm(stream, partition) : "",
    data.next < data.hw && !tailing ? el("a", { id: "next", href: `#/partition/${encodeURIComponent(stream)}/${partition}?${more}` }, data.search ? "search on →" : "next page →") : ""];
}

// -- a compacted stream as a table: the latest value per key -------------------------------

async function pageTable(stream) {
  if (!stream) throw new Error("no stream named: the address is #/table/STREAM");
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  const prefix = el("input", { id: "table-prefix", placeholder: "key prefix", value: q.get("prefix") || "" });
  const limit = el("input", { id: "table-limit", type: "number", min: 1, max: 500, value: q.get("limit") || 50 });
  const mode = el("select", { id: "table-format" }, ["text", "json", "hex"].map((m) => el("option", { value: m, selected: q.get("format") === m }, m)));
  const go = () => {
    const p = new URLSearchParams();
    if (prefix.value) p.set("prefix", prefix.value);
    p.set("limit", limit.value); p.set("format", mode.value);
    location.hash = `#/table/${encodeURIComponent(stream)}?${p}`;
  };
  const params = new URLSearchParams({ limit: limit.value });
  if (q.get("prefix")) params.set("prefix", q.get("prefix"));
  if (q.get("after")) params.set("after", q.get("after"));
  const data = await api(`/api/tables/${encodeURIComponent(stream)}?${params}`);
  const m = mode.value;
  const more = new URLSearchParams(q);
  if (data.next) more.set("after", data.next);
  return [
    el("h2", {}, `${stream} — table`),
    el("p", { id: "table-summary" }, `${fmt(data.keys)} keys` + (q.get("prefix") ? `, ${fmt(data.matching)} with prefix ${JSON.stringify(q.get("prefix"))}` : "") +
      `; showing ${data.entries.length}` + (q.get("after") ? " after the previous page" : "")),
    el("form", { class: "inline", onsubmit: (ev) => { ev.preventDefault(); go(); } },
      "Prefix", prefix, "limit", limit, "as", mode, el("button", { type: "submit", id: "table-load" }, "Show")),
    table(["Key", "Value", "Revision", "P"], data.entries.map((e) =>
      el("tr", { "data-key": e.key_b64 },
        el("td", { class: "wrap key" }, show(e.key_text, e.key_b64, m)),
        el("td", { class: "wrap value" }, show(e.value_text, e.value_b64, m)),
        el("td", { class: "num revision" }, e.revision), el("td", { class: "num" }, e.partition)))),
    data.next ? el("a", { id: "table-next", href: `#/table/${encodeURIComponent(stream)}?${more}` }, "next page →") : ""];
}

// Produce one message to this partition (--allow-writes): key, value, one header name=value.
function produceForm(stream, partition) {
  const key = el("input", { id: "produce-key", placeholder: "key (optional)" });
  const value = el("input", { id: "produce-value", placeholder: "value" });
  const header = el("input", { id: "produce-header", placeholder: "header name=value (optional)" });
  const msg = el("span", { id: "produce-result" });
  return el("form", { class: "inline", id: "produce-form", onsubmit: async (ev) => {
    ev.preventDefault();
    const headers = [];
    if (header.value) {
      const at = header.value.indexOf("=");
      headers.push(at < 0 ? [header.value, ""] : [header.value.slice(0, at), header.value.slice(at + 1)]);
    }
    try {
      const ack = await write("POST", "/api/records", { stream, partition, value: value.value, key: key.value || null, headers });
      msg.textContent = `produced at offset ${ack.offset}`; msg.className = "";
      value.value = "";
    } catch (e) { msg.textContent = e.message; msg.className = "error"; }
  } }, "Produce:", key, value, header, el("button", { type: "submit", id: "produce" }, "Send"), msg);
}

// -- consumer groups -----------------------------------------------------------------------

async function pageGroups() {
  const data = await api("/api/groups");
  const nodes = [el("h2", {}, "Consumer groups")];
  if (!data.groups.length) nodes.push(el("p", {}, "No consumer group yet."));
  for (const g of data.groups) {
    nodes.push(el("h3", { "data-group": g.name }, `${g.name} — lag `, el("span", { class: "group-lag", "data-group-lag": g.name }, fmt(g.lag))));
    nodes.push(table(["Member", "Instance", "Partitions"], g.members.length ? g.members.map((m) =>
      el("tr", { "data-member": m.member }, el("td", {}, m.member), el("td", {}, m.instance || "-"), el("td", {}, m.partitions.join(" ") || "-"))) :
      [el("tr", {}, el("td", { colspan: 3 }, "no active member"))]));
    nodes.push(table(["Stream", "P", "Member", "Committed", "HW", "Lag"], g.partitions.map((p) =>
      el("tr", { "data-group-partition": `${g.name}/${p.stream}/${p.partition}` },
        el("td", {}, p.stream), el("td", { class: "num" }, p.partition), el("td", { class: "member" }, p.member || "-"),
        el("td", { class: "num committed" }, fmt(p.committed)), el("td", { class: "num hw" }, fmt(p.hw)),
        el("td", { class: "num lag" }, fmt(p.lag))))));
    if (config.allow_writes) nodes.push(resetForm(g));
  }
  return nodes;
}

function resetForm(g) {
  const streams = [...new Set(g.partitions.map((p) => p.stream))];
  const stream = el("select", {}, streams.map((s) => el("option", { value: s }, s)));
  const to = el("input", { value: "earliest", title: "earliest, latest or an offset" });
  const msg = el("span", { class: "reset-result" });
  const preview = el("div", { class: "reset-preview" });
  const request = () => ({ stream: stream.value, to: /^\d+$/.test(to.value) ? Number(to.value) : to.value });
  const path = `/api/groups/${encodeURIComponent(g.name)}/reset`;
  // First a dry run: the offsets now and after, then Confirm or Cancel; only Confirm writes.
  return el("form", { class: "inline", "data-reset": g.name, onsubmit: async (ev) => {
    ev.preventDefault();
    msg.textContent = ""; msg.className = "reset-result";
    try {
      const plan = await write("POST", path, { ...request(), dry_run: true });
      const confirm = el("button", { type: "button", class: "confirm-reset", onclick: async () => {
        try { await write("POST", path, request()); preview.replaceChildren(); msg.textContent = "reset"; }
        catch (e) { msg.textContent = e.message; msg.className = "reset-result error"; }
      } }, "Confirm reset");
      const cancel = el("button", { type: "button", class: "cancel-reset", onclick: () => { preview.replaceChildren(); msg.textContent = "cancelled"; } }, "Cancel");
      preview.replaceChildren(
        table(["Partition", "Committed now", "After the reset"], Object.entries(plan.offsets).map(([k, v]) =>
          el("tr", { "data-preview": k }, el("td", {}, k), el("td", { class: "num now" }, fmt(plan.current[k])), el("td", { class: "num after" }, fmt(v))))),
        confirm, cancel);
    } catch (e) { msg.textContent = e.message; msg.className = "reset-result error"; }
  } }, "Reset offsets of", stream, "to", to, el("button", { type: "submit" }, "Preview"), msg, preview);
}

// -- live plots ----------------------------------------------------------------------------

// The smallest 1, 2 or 5 times a power of ten at or above v (at least 1): the y-axis top.
function niceCeil(v) {
  if (v <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function plot(id, title, t, series, unit) {
  const W = 620, H = 200, L = 60, R = 10, T = 24, B = 28;
  const names = Object.keys(series);
  let top = 0;
  for (const n of names) for (const v of series[n]) if (v !== null && v > top) top = v;
  const max = niceCeil(top);
  const t0 = t.length ? t[0] : 0, t1 = t.length ? t[t.length - 1] : 1;
  const span = Math.max(1, t1 - t0);
  const x = (tv) => L + ((tv - t0) / span) * (W - L - R);
  const y = (v) => T + (1 - v / max) * (H - T - B);
  const nodes = [svg("text", { x: L, y: 15 }, `${title} (${unit})`)];
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    nodes.push(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e5e7eb" }));
    nodes.push(svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, v.toLocaleString("en-US", { maximumFractionDigits: 2 })));
  }
  nodes.push(svg("text", { x: L, y: H - 8 }, `${Math.round(span)} s`), svg("text", { x: W - R, y: H - 8, "text-anchor": "end" }, "now"));
  const legend = el("div", { class: "legend" });
  names.forEach((n, i) => {
    const color = COLORS[i % COLORS.length];
    const pts = [];
    series[n].forEach((v, k) => { if (v !== null) pts.push(`${x(t[k]).toFixed(1)},${y(v).toFixed(1)}`); });
    nodes.push(svg("polyline", { points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 2, "data-series": n }));
    const last = [...series[n]].reverse().find((v) => v !== null);
    const sw = el("i", {}); sw.style.background = color;
    legend.append(el("span", {}, sw, `${n}: `, el("b", { "data-latest": `${id}/${n}` }, last === undefined ? "-" : Math.round(last).toLocaleString("en-US"))));
  });
  return el("div", { class: "plot" }, svg("svg", { id, width: W, height: H, viewBox: `0 0 ${W} ${H}` }, nodes), legend);
}

async function pagePlots() {
  const h = await api("/api/history");
  const visible = (obj) => Object.fromEntries(Object.entries(obj).filter(([k]) => !k.startsWith("__")));
  return [el("h2", {}, "Live plots (last 10 minutes, one sample a second)"), el("div", { class: "plots" },
    plot("plot-in", "in: messages appended per second, by stream", h.t, visible(h.in), "msg/s"),
    plot("plot-out", "out: messages consumed by groups (committed) per second, by stream", h.t, visible(h.out), "msg/s"),
    plot("plot-lag", "consumer-group lag", h.t, h.lag, "records"))];
}

// -- routing -------------------------------------------------------------------------------

const TITLES = { cluster: "Cluster", streams: "Streams", partition: "Records", table: "Table", groups: "Consumer groups", plots: "Live plots" };
let renderGen = 0;

// Each page function returns its nodes; only the latest route's are shown (a slow answer
// for a page left meanwhile is dropped), and an error replaces the page, in red, in place.
async function render() {
  const gen = ++renderGen;
  const hash = location.hash || "#/cluster";
  const parts = hash.split("?")[0].split("/").slice(1).map(decodeURIComponent);
  const page = TITLES[parts[0]] ? parts[0] : "cluster";
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === page || ((page === "partition" || page === "table") && a.dataset.page === "streams")));
  try {
    let nodes;
    if (page === "streams") nodes = await pageStreams();
    else if (page === "partition") nodes = await pagePartition(parts[1], partitionNumber(parts[2]));
    else if (page === "table") nodes = await pageTable(parts[1]);
    else if (page === "groups") nodes = await pageGroups();
    else if (page === "plots") nodes = await pagePlots();
    else nodes = await pageCluster();
    if (gen !== renderGen) return;
    const focused = document.activeElement && document.activeElement.id;
    setMain(...nodes);
    const again = focused && document.getElementById(focused);
    if (again && again !== document.activeElement) {
      again.focus();
      if (again.type === "text" || again.type === "") again.setSelectionRange(again.value.length, again.value.length);
    }
    delete document.body.dataset.error;
    document.body.dataset.loaded = page;
    status(`updated ${new Date().toLocaleTimeString()}` + (config.allow_writes ? " · writes allowed" : " · read-only"), false);
  } catch (e) {
    if (gen !== renderGen) return;
    setMain(el("h2", {}, TITLES[page]), el("p", { id: "page-error", class: "error page-error", role: "alert" }, e.message));
    document.body.dataset.error = page;
    document.body.dataset.loaded = page;
    status(e.message, true);
  }
}

// A partition number from the URL: a non-negative integer, else a clear error.
function partitionNumber(text) {
  if (text === undefined || text === "") return 0;
  if (!/^\d+$/.test(text)) throw new Error(`partition must be a non-negative integer, not ${JSON.stringify(text)}`);
  return Number(text);
}

function schedule() {
  clearInterval(timer);
  const page = (location.hash || "#/cluster").split("/")[1];
  const tailing = page === "partition" && new URLSearchParams(location.hash.split("?")[1] || "").get("tail") === "1";
  const every = page === "plots" || tailing ? 1000 : page === "partition" || page === "table" ? 0 : 2000;
  if (every) timer = setInterval(() => { if (!document.querySelector("form :focus, .reset-preview:not(:empty)")) render(); }, every);
}

window.addEventListener("hashchange", () => { render(); schedule(); });
window.addEventListener("DOMContentLoaded", async () => {
  try { config = await api("/api/config"); } catch (e) { status(e.message, true); }
  document.getElementById("footer").textContent = `servers: ${config.servers || "?"}`;
  await render();
  schedule();
});
