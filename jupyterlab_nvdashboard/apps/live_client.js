// The page's live-data client (see apps/live.py). Runs once, as a CustomJS, when the
// document is ready. In scope: source, x_range, following, headings, picker, spec.
// Frames: see stream/frames.py. Columns are little-endian float64, as in every browser.
const live = (window.nvdashboardLive = {
  seq: -1, frames: 0, resets: 0, rows: 0, connects: 0, hidden: false, parentHidden: false,
  window: spec.window, socket: null, retryMs: 500, lastHeading: 0, xEnd: null,
});
const decoder = new TextDecoder();

function streamUrl() {
  // From location.pathname, as BokehJS builds its own /ws URL: a trailing slash or a
  // proxy prefix changes nothing.
  const loc = window.location;
  const params = new URLSearchParams({since: String(live.seq)});
  if (spec.mode === "append") params.set("window", String(live.window));
  const token = new URLSearchParams(loc.search).get("token");
  if (token) params.set("token", token);
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${loc.host}${loc.pathname.replace(/\/+$/, "")}/stream?${params}`;
}

function decode(buffer) {
  const view = new DataView(buffer);
  const headerLength = view.getUint32(4, true);
  const header = JSON.parse(decoder.decode(new Uint8Array(buffer, 8, headerLength)));
  let offset = 8 + headerLength;
  offset += (8 - (offset % 8)) % 8;
  const data = {};
  for (const name of header.columns) {
    data[name] = new Float64Array(buffer, offset, header.rows);
    offset += 8 * header.rows;
  }
  Object.assign(data, header.text);
  return [header, data];
}

function niceCeiling(value) {
  // A round axis top a bit above the value: 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^n.
  if (!(value > 0) || !isFinite(value)) return 1;
  const scale = 10 ** Math.floor(Math.log10(value * 1.05));
  for (const step of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) {
    if (step * scale >= value * 1.05) return step * scale;
  }
  return 10 * scale;
}

function firstAtOrAfter(times, t) {
  let low = 0, high = times.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (times[mid] < t) low = mid + 1; else high = mid;
  }
  return low;
}

function moveAxes() {
  const times = source.data.time;
  const n = times ? times.length : 0;
  if (!n) return;
  const windowMs = live.window * 1000;
  const newest = times[n - 1];
  // Headroom ahead of the newest point scales with what is shown.
  const headroom = Math.max(2000, Math.min(windowMs, newest - times[0]) * 0.05);
  const end = newest + headroom;
  const start = Math.max(times[0], end - windowMs);
  x_range.setv({start, end});
  live.xEnd = end;
  const first = firstAtOrAfter(times, start);
  following.forEach((range, i) => {
    let top = 0;
    for (const key of spec.following_keys[i]) {
      const column = source.data[key];
      for (let j = first; j < n; j++) if (column[j] > top) top = column[j];
    }
    const end = niceCeiling(top);
    if (range.end !== end) range.setv({start: 0, end});
  });
}

function formatValue(value, unit) {
  if (value === undefined || Number.isNaN(value)) return "n/a";
  const digits = unit === "%" || Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2;
  return `${value.toFixed(digits)}${unit === "%" ? "" : " "}${unit}`.trim();
}

function fillHeadings(force) {
  // About once a second: the legend's current values; a Div re-renders on each change.
  const now = Date.now();
  if (!headings.length || (!force && now - live.lastHeading < 1000)) return;
  live.lastHeading = now;
  headings.forEach((div, i) => {
    div.text = spec.templates[i].replace(/\{value:([^}]+)\}/g, (_, key) => {
      const column = source.data[key];
      return formatValue(column && column.length ? column[column.length - 1] : NaN,
                         spec.units[key] || "");
    });
  });
}

function apply(buffer) {
  const [header, data] = decode(buffer);
  if (!header.reset && header.after !== live.seq) {
    // Not the continuation of what is drawn: start over from the whole window.
    live.seq = -1;
    reconnect();
    return;
  }
  if (spec.mode === "replace" || header.reset) {
    source.data = data;  // the source is not synced: nothing goes back to the server
    if (header.reset) live.resets++;
  } else if (header.rows) {
    source.stream(data, spec.rollover[String(live.window)], {sync: false});
  }
  live.seq = header.seq;
  live.frames++;
  live.rows += header.rows;
  live.retryMs = 500;
  if (x_range) moveAxes();
  fillHeadings(header.reset);
}

function connect() {
  if (live.socket || live.hidden) return;
  const socket = new WebSocket(streamUrl());
  socket.binaryType = "arraybuffer";
  live.socket = socket;
  live.connects++;
  socket.onmessage = (event) => apply(event.data);
  socket.onclose = (event) => {
    if (live.socket !== socket) return;
    live.socket = null;
    if (event.code === 4000) { window.location.reload(); return; }  // the layout changed
    setTimeout(connect, live.retryMs);
    live.retryMs = Math.min(10000, live.retryMs * 2);
  };
}

function disconnect() {
  const socket = live.socket;
  live.socket = null;
  if (socket) socket.close();
}

function reconnect() {
  disconnect();
  connect();
}

// A hidden page applies nothing: a background browser tab or minimized window
// (document.hidden), a JupyterLab tab in the background or a collapsed panel (the
// extension says so by postMessage; a display:none frame also has no size).
function updateVisibility() {
  const hidden = document.hidden || live.parentHidden ||
    window.innerWidth === 0 || window.innerHeight === 0;
  if (hidden === live.hidden) return;
  live.hidden = hidden;
  if (hidden) disconnect(); else connect();
}
document.addEventListener("visibilitychange", updateVisibility);
window.addEventListener("resize", updateVisibility);
window.addEventListener("message", (event) => {
  const message = event.data;
  if (event.source !== window.parent || event.origin !== window.location.origin) return;
  if (!message || message.type !== "nvdashboard:visibility") return;
  live.parentHidden = !message.visible;
  updateVisibility();
});

if (picker) {
  picker.properties.active.change.connect(() => {
    live.window = spec.windows[picker.active];
    live.seq = -1;
    reconnect();
  });
}

updateVisibility();
connect();
