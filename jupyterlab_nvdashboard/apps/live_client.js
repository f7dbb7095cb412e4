// The page's live-data client (see apps/live.py). Runs once, as a CustomJS, when the
// document is ready. In scope: source, x_range, following, headings, picker, spec, lines,
// areas, gpu_filter, plot, frame_range, grid_ticker, band_targets, band_scales, coverage,
// span_legend; viewOf
// and setDivHtml, from in_place.js, and openStream, from stream_client.js, before it.
// Frames: see stream/frames.py. Columns are little-endian float64, as in every browser.
const live = {
  seq: -1, frames: 0, resets: 0, rows: 0, connects: 0, hidden: false, parentHidden: false,
  window: spec.window, socket: null, retryMs: 500, xEnd: null,
  // A page opened on a span (apps/shown_span.py) starts where the server set its time axis.
  draws: 0, following: spec.follow !== false, moving: false, lastDraw: 0, source,
  // ... and its legends read the span (span_legend: the server's texts) until it follows
  // now again (the reset tool, a window button); then they read the newest sample.
  spanShown: Boolean(span_legend) && spec.follow === false,
  // A long window's open bucket and newest sample (stream/frames.py `open`), drawn after
  // the streamed rows until the next frame: columns like source.data's, NaN not available.
  open: null,
};
// One script per view the page streams (spec.stream: "" or a name): each is in
// nvdashboardStreams; nvdashboardLive is the one with a time axis (its reset tool's).
(window.nvdashboardStreams = window.nvdashboardStreams || {})[spec.stream || ""] = live;
if (x_range || !window.nvdashboardLive) window.nvdashboardLive = live;
// What the legend and the GPU filter hide: series keys, and GPU rows. `lines` holds each
// panel's MultiLine source, a row per series (apps/components.py).
const lineKeys = (lines || []).flatMap((panel) => panel.data.key);
const hiddenKeys = new Set((lines || []).flatMap(
  (panel) => panel.data.key.filter((_, i) => !panel.data.visible[i])));
const hiddenGpus = new Set();
// A long window's rows are buckets (stream/downsample.py): two rows each, the minimum at
// the bucket's start and the maximum at its middle, with the bucket's mean beside them in
// the column named with this suffix (MEAN_SUFFIX).
const MEAN = ":mean";
// Frames received but not yet drawn: drawn together at the next animation frame.
let pending = null, frameRequested = false, drawTimer = null;
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
  const path = spec.stream ? `${spec.stream}/stream` : "stream";
  return `${scheme}//${loc.host}${loc.pathname.replace(/\/+$/, "")}/${path}?${params}`;
}

function openColumns(open) {
  // The header's JSON columns, null for "not available", as the streamed ones are.
  if (!open) return null;
  const out = {};
  for (const [key, values] of Object.entries(open)) {
    out[key] = Float64Array.from(values, (v) => (v === null ? NaN : v));
  }
  return out;
}

function newestOf(key) {
  // A column's newest value: the open rows' last, else the streamed column's last.
  const open = live.open && live.open[key];
  if (open && open.length) return open[open.length - 1];
  const column = source.data[key + MEAN] || source.data[key];  // a bucket's mean, not its top
  return column && column.length ? column[column.length - 1] : NaN;
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
  const newest = Math.max(times[n - 1], newestOf("time"));
  // Headroom ahead of the newest point scales with what is shown.
  const headroom = Math.max(2000, Math.min(windowMs, newest - times[0]) * 0.05);
  let start = x_range.start;
  if (live.following) {
    const end = newest + headroom;
    start = Math.max(times[0], end - windowMs);
    live.moving = true;  // our own move, not the reader's pan or zoom
    x_range.setv({start, end});
    live.moving = false;
    live.xEnd = end;
  }
  const first = firstAtOrAfter(times, start);
  following.forEach((range, i) => {
    let top = 0;
    for (const key of spec.following_keys[i]) {
      if (isHidden(key)) continue;
      const column = source.data[key];
      for (let j = first; j < n; j++) if (column[j] > top) top = column[j];
      for (const value of (live.open && live.open[key]) || []) if (value > top) top = value;
    }
    const end = niceCeiling(top);
    if (range.end !== end) {
      range.setv({start: 0, end});
      fillScales();
    }
  });
}

// The bands (apps/components.py Timeline): HTML headings and scales over the one canvas,
// laid out by the browser. Each band's lines are drawn where its `data-band-lines` box is:
// the canvas's y-range is its height in pixels, measured from its bottom.
const bandBounds = [];  // [bottom, top] of each band shown, heading included
function bandBlocks() {
  const view = headings.length && plot ? viewOf(headings[0]) : null;
  const root = view && (view.shadow_el || view.el.shadowRoot || view.el);
  return root ? Array.from(root.querySelectorAll("[data-band]")) : [];
}

function fitBands() {
  const blocks = bandBlocks();
  if (!blocks.length) return;
  const whole = blocks[0].parentElement.getBoundingClientRect();
  if (!whole.height) return;  // not laid out: the page is hidden
  const ticks = [];
  blocks.forEach((block, i) => {
    const target = band_targets[i];
    if (block.style.display === "none") {
      bandBounds[i] = null;
      target.setv({start: -2, end: -1});  // below the canvas: a folded band draws nothing
      return;
    }
    const box = block.getBoundingClientRect();
    const lines = block.querySelector("[data-band-lines]").getBoundingClientRect();
    const [bottom, top] = [whole.bottom - lines.bottom, whole.bottom - lines.top];
    bandBounds[i] = [whole.bottom - box.bottom, whole.bottom - box.top];
    if (target.start !== bottom || target.end !== top) target.setv({start: bottom, end: top});
    if (band_scales[i]) ticks.push(bottom, (bottom + top) / 2, top);
  });
  const height = Math.round(whole.height);
  if (frame_range.end !== height) {
    frame_range.setv({start: 0, end: height});
    plot.frame_height = height;
  }
  grid_ticker.ticks = ticks;
}

function fillScales() {
  // Each band of values labelled at its bottom, middle and top (components.SCALE_FRACTIONS).
  bandBlocks().forEach((block, i) => {
    const range = band_scales[i];
    if (!range) return;
    for (const label of block.querySelectorAll("[data-scale]")) {
      const value = range.start + Number(label.dataset.scale) * (range.end - range.start);
      const text = String(Number(value.toPrecision(3)));
      if (label.textContent !== text) label.textContent = text;
    }
  });
}

function bandAt(y) {
  // The band under a height in the canvas (hover: special_vars.y).
  let closest = -1, distance = Infinity;
  bandBounds.forEach((bounds, i) => {
    if (!bounds) return;
    const d = y < bounds[0] ? bounds[0] - y : y > bounds[1] ? y - bounds[1] : 0;
    if (d < distance) { closest = i; distance = d; }
  });
  return closest;
}

function timeText(ms) {
  return new Date(ms).toISOString().slice(11, 19);  // UTC, as the time axis
}

live.hoverText = (vars) => {
  // What the band under the pointer shows at the hovered time: a line per series, or, for
  // a band of rows, per GPU the rows it is on.
  const band = spec.band_hover[bandAt(vars.y)];
  const i = vars.index;
  if (!band || i === undefined || i === null) return "";
  const out = [timeText(source.data.time[i])];
  const buckets = bucketed();
  const first = i - (i % 2);  // a long window's bucket: its minimum's row, then its maximum's
  for (const [key, label, unit] of band.values || []) {
    if (isHidden(key)) continue;
    const column = source.data[key];
    out.push(buckets ? `${label}: ${formatValue(source.data[key + MEAN][first], unit)} ` +
      `(${formatValue(column[first], unit)} to ${formatValue(column[first + 1], unit)})`
      : `${label}: ${formatValue(column[i], unit)}`);
  }
  for (const [label, rows] of band.rows || []) {
    if (rows.length && isHidden(rows[0][0])) continue;
    const on = rows.filter(([key]) => Number.isFinite((source.data[key] || [])[i]));
    out.push(`${label}: ${on.length ? on.map(([, name]) => name).join(", ") : "not available"}`);
  }
  return out.join("\n");
};

function formatValue(value, unit) {
  if (value === undefined || Number.isNaN(value)) return "n/a";
  const digits = unit === "%" || Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2;
  return `${value.toFixed(digits)}${unit === "%" ? "" : " "}${unit}`.trim();
}

// Each legend's entries, found once in its Div's rendered DOM: values are written into
// them directly. Setting a Div's text makes BokehJS rebuild the Div and lay out the whole
// page again, which cost a timeline page about 5% of a core at one update a second.
const headingEntries = new Map();

function entriesOf(div) {
  const cached = headingEntries.get(div);
  if (cached && cached.length && cached[0].span.isConnected) return cached;
  const view = viewOf(div);
  const root = view && (view.shadow_el || view.el.shadowRoot || view.el);
  const entries = root ? Array.from(root.querySelectorAll("[data-series]"), (span) => ({
    span, key: span.dataset.series, value: span.querySelector("b"),
  })) : [];
  headingEntries.set(div, entries);
  return entries;
}

function currentValue(key) {
  const value = newestOf(key);
  return Number.isNaN(value) && lostNow(key) ? "lost" : formatValue(value, spec.units[key] || "");
}

function spanTexts() {
  // The span's texts by series key while the legends read it, else null.
  if (!live.spanShown) return null;
  const {key, text} = span_legend.data;
  return new Map(key.map((k, i) => [k, text[i]]));
}

function showSpanWords(div) {
  // The words that say the values read the span ("mean over cell [12]:"), while they do.
  const view = viewOf(div);
  const root = view && (view.shadow_el || view.el.shadowRoot || view.el);
  const display = live.spanShown ? "" : "none";
  for (const note of root ? root.querySelectorAll("[data-span-note]") : []) {
    if (note.style.display !== display) note.style.display = display;
  }
}

function fillHeadings() {
  // At each draw (at most once a second, see redrawMs): the legend's current values (the
  // span's, while it is shown), and which entries are hidden.
  const onSpan = spanTexts();
  headings.forEach((div) => {
    if (span_legend) showSpanWords(div);
    for (const {span, key, value} of entriesOf(div)) {
      const text = onSpan && onSpan.has(key) ? onSpan.get(key) : currentValue(key);
      if (value && value.textContent !== text) value.textContent = text;
      const hidden = isHidden(key);
      if ((span.style.opacity === "0.4") !== hidden) {
        span.style.opacity = hidden ? "0.4" : "";
        span.style.textDecoration = hidden ? "line-through" : "";
        span.setAttribute("aria-pressed", String(!hidden));
      }
    }
  });
}

function lostNow(key) {
  // The series' GPU's column (LiveView.lost_columns): 1 while that GPU is lost.
  const column = (spec.lost_columns || {})[key];
  return column !== undefined && newestOf(column) === 1;
}

function isHidden(key) {
  const gpu = (spec.series_gpu || {})[key];
  return hiddenKeys.has(key) || (gpu !== undefined && gpu !== null && hiddenGpus.has(gpu));
}

function bucketed() {
  return lineKeys.length > 0 && source.data[lineKeys[0] + MEAN] !== undefined;
}

function bucketShapes(key) {
  // A series' buckets, closed and then open: its mean as a step across each bucket, and its
  // band from minimum to maximum, a polygon per run of buckets with values (NaN between).
  const line = {xs: [], ys: []}, area = {xs: [], ys: []};
  let upper = [], lower = [];
  const closeRun = () => {
    if (!upper.length) return;
    if (area.xs.length) { area.xs.push(NaN); area.ys.push(NaN); }
    for (const [x, y] of upper.concat(lower.reverse())) { area.xs.push(x); area.ys.push(y); }
    upper = []; lower = [];
  };
  const bucket = (start, end, low, high, mean) => {
    line.xs.push(start, end);
    line.ys.push(mean, mean);
    if (Number.isFinite(low) && Number.isFinite(high)) {
      upper.push([start, high], [end, high]);
      lower.push([start, low], [end, low]);
    } else {
      closeRun();
    }
  };
  const values = source.data[key], means = source.data[key + MEAN];
  const open = live.open && live.open[key] ? live.open : null;
  bucketSpans().forEach(([start, end], b) => {
    if (b < values.length / 2) {
      bucket(start, end, values[2 * b], values[2 * b + 1], means[2 * b]);
    } else if (open) {  // the open bucket (its minimum, maximum and mean so far)
      bucket(start, end, open[key][0], open[key][1], open[key + MEAN][0]);
    }
  });
  closeRun();
  return {line, area};
}

function bucketSpans() {
  // Where each bucket is drawn, [start, end] in ms: the closed ones, then the open one up to
  // the newest sample. A bucket starts at its first sample (stream/downsample.py) and ends
  // where the next begins: a window's first frame cuts the bucket that holds the history's
  // start in two, its stored part here and its live part open.
  const times = source.data.time, spans = [];
  const open = live.open && live.open.time.length >= 3 ? live.open : null;
  for (let i = 0; i + 1 < times.length; i += 2) {
    const next = i + 2 < times.length ? times[i + 2] : open ? open.time[0] : Infinity;
    spans.push([times[i], Math.min(2 * times[i + 1] - times[i], next)]);
  }
  if (open) spans.push([open.time[0], open.time[open.time.length - 1]]);
  return spans;
}

function drawLines() {
  // Each panel's series that are shown, as rows of its MultiLine, from the streamed columns
  // and then the open rows; a long window's buckets as their means in their bands.
  const open = live.open;
  const withOpen = (key) => (open && open[key] ? concat(source.data[key], open[key])
    : source.data[key]);
  const times = withOpen("time");
  const buckets = bucketed();
  (lines || []).forEach((panel, p) => {
    const visible = panel.data.key.map((key) => !isHidden(key));
    const shapes = panel.data.key.map((key, i) => (visible[i] && buckets ? bucketShapes(key)
      : null));
    panel.data = {
      ...panel.data, visible,
      ys: panel.data.key.map((key, i) => (!visible[i] ? [] : shapes[i] ? shapes[i].line.ys
        : withOpen(key))),
      xs: panel.data.key.map((key, i) => (!visible[i] ? [] : shapes[i] ? shapes[i].line.xs
        : times)),
    };
    const area = (areas || [])[p];
    if (area && (buckets || area.data.xs.some((xs) => xs.length))) {
      area.data = {...area.data, xs: shapes.map((shape) => (shape ? shape.area.xs : [])),
                   ys: shapes.map((shape) => (shape ? shape.area.ys : []))};
    }
  });
}

function applyVisibility() {
  drawLines();
  // A band that shows one GPU folds away with it (the resize observer places the rest).
  const blocks = bandBlocks();
  (spec.band_gpus || []).forEach((gpu, i) => {
    if (gpu === null || gpu === undefined || !blocks[i]) return;
    const display = hiddenGpus.has(gpu) ? "none" : "";
    if (blocks[i].style.display !== display) blocks[i].style.display = display;
  });
  if (x_range) moveAxes();
  fillHeadings();
}

function concat(a, b) {
  if (Array.isArray(a)) return a.concat(Array.from(b));
  const out = new Float64Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

// The tables that show the source (/GPU-Processes'), found at the first draw. BokehJS
// re-renders a DataTable when its view's row indices change, and new data of as many rows
// as the old gives equal indices: a table showed its first rows for as long as their count
// stayed, an ended process among them (issue 51).
let tables = null;
function refreshTables() {
  if (tables === null) {
    tables = source.document ? [...source.document.all_models].filter(
      (model) => model.type === "DataTable" && model.source === source) : [];
  }
  for (const table of tables) table.view.change.emit();
}

function rolledOver(columns, added, keep) {
  // The columns with the added rows after them, the oldest dropped past `keep` rows: new
  // arrays each time. BokehJS's source.stream rolls a full typed-array column over in
  // place, so once a window had filled, each panel's lines were given the same arrays as
  // at their last draw; BokehJS found the new data equal to the old and drew nothing more,
  // while the axis went on scrolling (issue 51).
  const out = {};
  for (const [key, column] of Object.entries(columns)) {
    const joined = added[key] ? concat(column, added[key]) : column;
    out[key] = joined.length > keep ? joined.slice(joined.length - keep) : joined;
  }
  return out;
}

function redrawMs() {
  const ms = spec.mode === "append" ? spec.redraw_ms[String(live.window)] : undefined;
  return ms === undefined ? spec.redraw_ms.replace : ms;
}

function draw() {
  // Everything that arrived since the last draw, drawn at once in one animation frame.
  frameRequested = false;
  if (!pending) return;
  const {data, reset} = pending;
  live.open = pending.open;
  pending = null;
  if (spec.mode === "replace" || reset) {
    source.data = data;  // the source is not synced: nothing goes back to the server
    refreshTables();
  } else if (data[Object.keys(data)[0]].length) {
    source.data = rolledOver(source.data, data, spec.rollover[String(live.window)]);
  }
  drawLines();
  live.draws++;
  live.lastDraw = Date.now();
  if (x_range) moveAxes();
  fillHeadings();
  showCoverage();
}

function spanText(ms) {
  // 40 s, 25 min, 5 h, 3 d: how much of a window is recorded, as its picker names windows.
  if (ms < 60000) return `${Math.round(ms / 1000)} s`;
  if (ms < 2 * 3600000) return `${Math.round(ms / 60000)} min`;
  if (ms < 2 * 86400000) return `${Math.round(ms / 3600000)} h`;
  return `${Math.round(ms / 86400000)} d`;
}

function showCoverage() {
  // A window longer than the history recorded says how much it holds: its time axis spans
  // only what there is.
  if (!coverage || !picker) return;
  // What the samples cover: a long window's buckets that hold a reading, each from its
  // first sample; a bucket of the time the server was off holds none (NaN) and counts for
  // nothing.
  const times = source.data.time;
  const held = (b) => lineKeys.some((key) => {
    const column = 2 * b < times.length ? source.data[key] : live.open && live.open[key];
    return column && Number.isFinite(column[2 * b < times.length ? 2 * b : 0]);
  });
  const recorded = !times || !times.length ? 0 : bucketed()
    ? bucketSpans().reduce((sum, [start, end], b) => sum + (held(b) ? end - start : 0), 0)
    : newestOf("time") - times[0];
  const label = picker.labels[picker.active];
  const text = recorded < 0.98 * live.window * 1000
    ? `${spanText(recorded)} of ${label} recorded` : "";
  setDivHtml(coverage, text);
}

function schedule() {
  // At most one draw per redraw_ms (see apps/live.py); a reset (a new window) draws at
  // once. No animation frame is asked for before a draw is due: each one makes the
  // browser produce a frame, which cost as much as the drawing itself.
  if (frameRequested) return;
  const wait = pending && pending.reset ? 0 : live.lastDraw + redrawMs() - Date.now();
  if (wait > 0) {
    if (!drawTimer) drawTimer = setTimeout(() => { drawTimer = null; schedule(); }, wait);
    return;
  }
  if (drawTimer) { clearTimeout(drawTimer); drawTimer = null; }
  frameRequested = true;
  window.requestAnimationFrame(draw);
}

function apply(buffer) {
  const [header, data] = decode(buffer);
  if (!header.reset && header.after !== live.seq) {
    // Not the continuation of what is drawn: start over from the whole window.
    live.seq = -1;
    stream.reconnect();
    return;
  }
  if (spec.mode === "replace" || header.reset || !pending) {
    pending = {data, reset: header.reset || (pending ? pending.reset : false)};
    if (header.reset) live.resets++;
  } else if (header.rows) {
    for (const key of Object.keys(data)) pending.data[key] = concat(pending.data[key], data[key]);
  }
  pending.open = openColumns(header.open);  // the newest frame's open rows stand
  live.seq = header.seq;
  live.frames++;
  live.rows += header.rows;
  live.retryMs = 500;
  schedule();
}

if (picker) {
  picker.properties.active.change.connect(() => {
    live.window = spec.windows[picker.active];
    live.seq = -1;
    live.following = true;
    live.spanShown = false;
    pending = null;
    stream.reconnect();
  });
}

// Panning or zooming time stops following the newest sample; the reset tool follows again.
live.follow = () => {
  live.following = true;
  if (live.spanShown) { live.spanShown = false; fillHeadings(); }
  // The reset tool also set the canvas's y-range back to the height the server guessed:
  // the bands' lines were drawn tens of pixels off their headings until the next resize.
  if (plot) fitBands();
  if (x_range) moveAxes();
};
// The span's legend texts, read on a thread, land after the page is shown.
if (span_legend) span_legend.properties.data.change.connect(fillHeadings);
if (x_range) {
  const moved = () => { if (!live.moving) live.following = false; };
  x_range.properties.start.change.connect(moved);
  x_range.properties.end.change.connect(moved);
}

// The GPU filter's buttons say which GPUs are shown, as the legend does: a check on a
// pressed button, the others struck through, and aria-pressed on each. Added to the
// stylesheets the page's theme gave the widget, not in place of them.
const PRESSED_CSS = ".bk-btn.bk-active::before { content: '\\2713\\00a0'; }\n" +
  ".bk-btn:not(.bk-active) { text-decoration: line-through; }";

function markPressed() {
  const view = viewOf(gpu_filter);
  const root = view && (view.shadow_el || view.el.shadowRoot);
  if (!root) return;
  root.querySelectorAll(".bk-btn").forEach((button, i) => {
    const pressed = String(gpu_filter.active.includes(i));
    if (button.getAttribute("aria-pressed") !== pressed) {
      button.setAttribute("aria-pressed", pressed);
    }
  });
}

if (gpu_filter) {
  gpu_filter.stylesheets = [...gpu_filter.stylesheets, PRESSED_CSS];
  gpu_filter.properties.active.change.connect(markPressed);
  markPressed();
  const followFilter = () => {
    hiddenGpus.clear();
    spec.filter_gpus.forEach((gpu, i) => {
      if (!gpu_filter.active.includes(i)) hiddenGpus.add(gpu);
    });
    applyVisibility();
  };
  gpu_filter.properties.active.change.connect(followFilter);
  // A page may be built with some GPUs off (/Workload shows the judged GPU's lines).
  if (gpu_filter.active.length !== spec.filter_gpus.length) followFilter();
}

// A click on a legend entry (in a Div's shadow root), or Enter or Space on the one that has
// the keyboard's focus, hides or shows its line; a GPU's entry hides or shows that GPU on
// every chart, through the GPU filter.
function toggleEntry(key) {
  const gpu = (spec.series_gpu || {})[key];
  const position = gpu === null || gpu === undefined ? -1 : spec.filter_gpus.indexOf(gpu);
  if (gpu_filter && position >= 0) {
    const active = gpu_filter.active.includes(position)
      ? gpu_filter.active.filter((i) => i !== position)
      : gpu_filter.active.concat([position]).sort((a, b) => a - b);
    gpu_filter.active = active;  // its change handler applies it
    return;
  }
  if (hiddenKeys.has(key)) hiddenKeys.delete(key); else hiddenKeys.add(key);
  applyVisibility();
}

function legendEntry(event) {
  return event.composedPath().find((el) => el instanceof Element && el.dataset &&
                                   el.dataset.series !== undefined);
}

if (lineKeys.length) {
  document.addEventListener("click", (event) => {
    const item = legendEntry(event);
    if (item) toggleEntry(item.dataset.series);
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" && event.key !== " ") return;
    const item = legendEntry(event);
    if (!item) return;
    event.preventDefault();  // Space would scroll the page
    toggleEntry(item.dataset.series);
  });
}

// The bands follow their HTML: at first, and whenever it changes size (a heading that
// wraps on a narrower page, a band folded away with its GPU).
if (plot) {
  const blocks = bandBlocks();
  if (blocks.length && window.ResizeObserver) {
    let queued = false;
    new ResizeObserver(() => {
      if (queued) return;
      queued = true;
      window.requestAnimationFrame(() => { queued = false; fitBands(); });
    }).observe(blocks[0].parentElement);
  }
  fitBands();
  fillScales();
}

// Last: every handler above is in place before the first frame can arrive.
const stream = openStream(live, streamUrl, apply);
