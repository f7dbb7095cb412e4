/**
 * GPUs at a glance: the status-bar item, the sidebar's live bars and the
 * "Your GPU kernels" list all read `{base}nvdashboard/glance.json`, through
 * one `GlanceModel` that polls it only while JupyterLab is visible.
 *
 * Render discipline: the model compares each answer with the last and emits
 * only on a change (or a failure, whose age the views show); one request is
 * in flight at a time, so an older answer never overwrites a newer one; the
 * sidebar section draws only while visible and updates its rows in place,
 * keyed by kernel id and device index, so focus and hover survive a refresh.
 *
 * Shutting a kernel down goes through JupyterLab's own kernel API with the
 * user's credentials, after a confirmation, and only for kernels this
 * Jupyter server runs; the dashboard server never stops anything itself.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { JSONExt, JSONObject } from '@lumino/coreutils';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { element, placeInOrder, RenderOnShow, setAttr, setText } from './dom';
import {
  errorMessage,
  formatAge,
  formatBytes,
  NULL_BUNDLE,
  numberOrNull
} from './model';

/** One device now; `null` means not available. */
export interface IGlanceDevice {
  index: number;
  label: string;
  kind: string;
  utilization_pct: number | null;
  memory_used_bytes: number | null;
  memory_total_bytes: number | null;
}

/** One of the current user's kernels that holds GPU memory. */
export interface IGpuKernel {
  kernel_id: string;
  path: string;
  memory_bytes: number;
  /** False when the driver did not report some of its processes' memory. */
  memory_known: boolean;
  devices: string[];
}

/** Why a GPU that holds one of the user's kernels is slow: its first finding. */
export interface IGlanceDiagnosis {
  index: number;
  label: string;
  cause: string;
  /** The finding in words, with its figures and how sure it is. */
  line: string;
  /** One thing to try ('' when there is nothing to change). */
  advice: string;
}

export interface IGlance {
  devices: IGlanceDevice[];
  kernels: IGpuKernel[];
  diagnoses: IGlanceDiagnosis[];
}

/**
 * What the views show: the last good reading and whether the last poll
 * failed. Times are `Date.now()` milliseconds.
 */
export interface IGlanceState {
  glance: IGlance | null;
  /** When `glance` was read; null before the first answer. */
  readAt: number | null;
  /** Why the last poll failed; null when it succeeded. */
  error: string | null;
  /** When the last poll failed; null when it succeeded. */
  failedAt: number | null;
}

/** Which figure the status bar shows. */
export type StatusFigure = 'busiest' | 'each';

/** How often the glance is polled while JupyterLab is visible (ms). */
export const GLANCE_INTERVAL_MS = 2000;

/** Sidebar section classes (tests and browser tests find them by these). */
export const GLANCE_CLASS = 'nvdashboard-glance';
export const KERNEL_ROW_CLASS = 'nvdashboard-kernel';
export const STATUS_ITEM_CLASS = 'nvdashboard-statusbar-item';
export const DIAGNOSIS_CLASS = 'nvdashboard-diagnoses';
export const STALE_CLASS = 'nvdashboard-stale';

/** Validate `glance.json`; anything malformed is left out, never thrown. */
export function parseGlance(body: unknown): IGlance {
  const data = (body ?? {}) as Record<string, unknown>;
  const devices: IGlanceDevice[] = [];
  for (const item of Array.isArray(data.devices) ? data.devices : []) {
    const d = (item ?? {}) as Record<string, unknown>;
    if (typeof d.index !== 'number' || typeof d.label !== 'string') {
      continue;
    }
    devices.push({
      index: d.index,
      label: d.label,
      kind: typeof d.kind === 'string' ? d.kind : 'gpu',
      utilization_pct: numberOrNull(d.utilization_pct),
      memory_used_bytes: numberOrNull(d.memory_used_bytes),
      memory_total_bytes: numberOrNull(d.memory_total_bytes)
    });
  }
  const kernels: IGpuKernel[] = [];
  for (const item of Array.isArray(data.kernels) ? data.kernels : []) {
    const k = (item ?? {}) as Record<string, unknown>;
    if (typeof k.kernel_id !== 'string' || typeof k.path !== 'string') {
      continue;
    }
    kernels.push({
      kernel_id: k.kernel_id,
      path: k.path,
      memory_bytes: numberOrNull(k.memory_bytes) ?? 0,
      memory_known: k.memory_known !== false,
      devices: Array.isArray(k.devices)
        ? k.devices.filter((x): x is string => typeof x === 'string')
        : []
    });
  }
  const diagnoses: IGlanceDiagnosis[] = [];
  for (const item of Array.isArray(data.diagnoses) ? data.diagnoses : []) {
    const g = (item ?? {}) as Record<string, unknown>;
    if (typeof g.index !== 'number' || typeof g.line !== 'string') {
      continue;
    }
    diagnoses.push({
      index: g.index,
      label: typeof g.label === 'string' ? g.label : `GPU ${g.index}`,
      cause: typeof g.cause === 'string' ? g.cause : 'unknown',
      line: g.line,
      advice: typeof g.advice === 'string' ? g.advice : ''
    });
  }
  return { devices, kernels, diagnoses };
}

/**
 * The stale state in words, or null while the last poll succeeded:
 * `server unreachable` before any reading, else `stale` with its age.
 */
export function staleWords(
  state: IGlanceState,
  now: number = Date.now(),
  trans: TranslationBundle = NULL_BUNDLE
): string | null {
  if (state.error === null) {
    return null;
  }
  if (state.readAt === null) {
    return trans.__('server unreachable');
  }
  return trans.__('stale, read %1 ago', formatAge(now - state.readAt, trans));
}

/** The physical GPUs (or every device when there is none, e.g. MIG only). */
function shownDevices(glance: IGlance): IGlanceDevice[] {
  const gpus = glance.devices.filter(d => d.kind === 'gpu');
  return gpus.length ? gpus : glance.devices;
}

function memoryFraction(d: IGlanceDevice): number | null {
  return d.memory_used_bytes !== null && d.memory_total_bytes
    ? d.memory_used_bytes / d.memory_total_bytes
    : null;
}

/**
 * The busiest device: highest utilization, then highest share of memory in
 * use; a device that reports neither comes last.
 */
export function busiestDevice(glance: IGlance): IGlanceDevice | null {
  let best: IGlanceDevice | null = null;
  const key = (d: IGlanceDevice): [number, number] => [
    d.utilization_pct ?? -1,
    memoryFraction(d) ?? -1
  ];
  for (const d of shownDevices(glance)) {
    if (!best) {
      best = d;
      continue;
    }
    const [u, m] = key(d);
    const [bu, bm] = key(best);
    if (u > bu || (u === bu && m > bm)) {
      best = d;
    }
  }
  return best;
}

function percent(value: number | null, trans: TranslationBundle): string {
  return value === null ? trans.__('n/a') : `${Math.round(value)}%`;
}

/**
 * A few characters for the status bar: the busiest GPU
 * (`GPU 1 80% · 20 GB/80 GB`) or each GPU's utilization (`GPU 40% 80%`),
 * then `stale …` after a failed poll. Never a mean, which hides a full GPU.
 */
export function statusText(
  state: IGlanceState | null,
  figure: StatusFigure = 'busiest',
  now: number = Date.now(),
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const glance = state?.glance ?? null;
  const stale = state ? staleWords(state, now, trans) : null;
  if (!glance || glance.devices.length === 0) {
    return stale ? trans.__('GPU: %1', stale) : 'GPU –';
  }
  let text: string;
  if (figure === 'each') {
    const figures = shownDevices(glance).map(d =>
      percent(d.utilization_pct, trans)
    );
    text = `GPU ${figures.join(' ')}`;
  } else {
    const d = busiestDevice(glance) as IGlanceDevice;
    const memory =
      d.memory_used_bytes !== null && d.memory_total_bytes
        ? `${formatBytes(d.memory_used_bytes)}/${formatBytes(d.memory_total_bytes)}`
        : trans.__('memory n/a');
    text = `${d.label} ${percent(d.utilization_pct, trans)} · ${memory}`;
  }
  return stale ? `${text} · ${stale}` : text;
}

/** One line per device for the status bar's tooltip. */
export function deviceLine(
  d: IGlanceDevice,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const memory =
    d.memory_total_bytes !== null
      ? trans.__(
          '%1 of %2 memory',
          formatBytes(d.memory_used_bytes),
          formatBytes(d.memory_total_bytes)
        )
      : trans.__('%1 memory', formatBytes(d.memory_used_bytes));
  return trans.__(
    '%1: %2 utilization, %3',
    d.label,
    percent(d.utilization_pct, trans),
    memory
  );
}

/**
 * The status bar's tooltip: every GPU on a line of its own, the stale state,
 * and why the GPUs of your kernels are slow.
 */
export function statusTooltip(
  state: IGlanceState | null,
  now: number = Date.now(),
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const lines = [
    trans.__('GPU utilization and memory (click for GPU dashboards)')
  ];
  const glance = state?.glance ?? null;
  if (glance) {
    lines.push(...glance.devices.map(d => deviceLine(d, trans)));
  }
  if (state && state.error !== null) {
    lines.push(
      trans.__(
        'The dashboard server did not answer (%1); %2.',
        state.error,
        staleWords(state, now, trans) ?? ''
      )
    );
  }
  if (glance && glance.diagnoses.length) {
    lines.push(trans.__('The GPUs of your kernels:'));
    for (const d of glance.diagnoses) {
      lines.push(d.advice ? trans.__('%1 Try: %2.', d.line, d.advice) : d.line);
    }
  }
  return lines.join('\n');
}

export namespace GlanceModel {
  export interface IOptions {
    /** Resolve with `glance.json`'s parsed body. */
    fetch: () => Promise<unknown>;
    /** Milliseconds between polls, and between retries after a failure. */
    interval?: number;
    /** When the poll pauses; by default while the page is hidden. */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
    autoStart?: boolean;
    /** The clock (tests). */
    now?: () => number;
  }
}

/** The one poll of `glance.json` shared by the status bar and the sidebar. */
export class GlanceModel {
  constructor(options: GlanceModel.IOptions) {
    this._fetch = options.fetch;
    this._now = options.now ?? Date.now;
    this._interval = options.interval ?? GLANCE_INTERVAL_MS;
    this._poll = new Poll({
      auto: false,
      factory: () => this.refresh(),
      frequency: GlanceModel.frequency(this._interval),
      name: 'nvdashboard:glance',
      standby: options.standby ?? 'when-hidden'
    });
    if (options.autoStart !== false) {
      void this._poll.start();
    }
  }

  /**
   * A constant rate, failures included: Lumino's backoff draws the next
   * delay from the previous tick's interval, so a server that comes back
   * could wait many intervals. Here it is found by the next poll.
   */
  static frequency(interval: number): {
    interval: number;
    backoff: false;
    max: number;
  } {
    return { interval, backoff: false, max: interval };
  }

  /** The last good reading, or null. */
  get glance(): IGlance | null {
    return this._state.glance;
  }

  /** The last reading and whether the last poll failed. */
  get state(): IGlanceState {
    return this._state;
  }

  /** Whether the last poll failed. */
  get stale(): boolean {
    return this._state.error !== null;
  }

  /** Emitted when what the views show changed. */
  get changed(): ISignal<this, IGlanceState> {
    return this._changed;
  }

  get poll(): Poll {
    return this._poll;
  }

  /** The clock the views measure the age of a reading with. */
  now(): number {
    return this._now();
  }

  /** Milliseconds between polls; a change applies at once. */
  get interval(): number {
    return this._interval;
  }

  set interval(value: number) {
    if (!(value > 0) || value === this._interval) {
      return;
    }
    this._interval = value;
    this._poll.frequency = GlanceModel.frequency(value);
    // The timer already set runs to the old interval: start over now.
    if (this._poll.state.phase !== 'constructed') {
      void this._poll.refresh();
    }
  }

  /**
   * Fetch now; rejects on failure. One request is in flight at a time: a
   * call while one is out waits for it and then asks again, so what it
   * resolves with was requested after the call (say, after a shutdown).
   */
  refresh(): Promise<void> {
    if (!this._inFlight) {
      return this._request();
    }
    if (!this._queued) {
      this._queued = this._inFlight
        .catch(() => undefined)
        .then(() => {
          this._queued = null;
          return this._request();
        });
    }
    return this._queued;
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _request(): Promise<void> {
    const sequence = ++this._sequence;
    const run = Promise.resolve()
      .then(() => this._fetch())
      .then(
        body => this._apply(sequence, parseGlance(body), null),
        error => {
          this._apply(sequence, null, errorMessage(error));
          throw error;
        }
      );
    this._inFlight = run;
    void run
      .catch(() => undefined)
      .then(() => {
        if (this._inFlight === run) {
          this._inFlight = null;
        }
      });
    return run;
  }

  private _apply(
    sequence: number,
    glance: IGlance | null,
    error: string | null
  ): void {
    if (sequence < this._applied) {
      return; // an older answer never overwrites a newer one
    }
    this._applied = sequence;
    const previous = this._state;
    const now = this._now();
    if (glance) {
      const same =
        previous.error === null &&
        previous.glance !== null &&
        JSONExt.deepEqual(
          previous.glance as unknown as JSONObject,
          glance as unknown as JSONObject
        );
      // The time is kept either way, so a stale state counts from the last answer.
      this._state = { glance, readAt: now, error: null, failedAt: null };
      if (same) {
        return;
      }
    } else {
      // A failure always changes what is shown: the age of the last reading.
      this._state = { ...previous, error, failedAt: now };
    }
    this._changed.emit(this._state);
  }

  private _fetch: () => Promise<unknown>;
  private _now: () => number;
  private _interval: number;
  private _poll: Poll;
  private _state: IGlanceState = {
    glance: null,
    readAt: null,
    error: null,
    failedAt: null
  };
  private _changed = new Signal<this, IGlanceState>(this);
  private _inFlight: Promise<void> | null = null;
  private _queued: Promise<void> | null = null;
  private _sequence = 0;
  private _applied = 0;
}

export namespace GlanceStatusItem {
  export interface IOptions {
    model: GlanceModel;
    /** What a click, Enter or Space does (open the sidebar). */
    onActivate: () => void;
    figure?: StatusFigure;
    /** Whether the user wants the item at all (a setting). */
    enabled?: boolean;
    trans?: TranslationBundle;
  }
}

/**
 * The status-bar item: a few characters, and a button: it takes focus and
 * Enter or Space opens the sidebar, as a click does. It is active only when
 * the user wants it and there is a GPU to show.
 */
export class GlanceStatusItem extends Widget {
  constructor(options: GlanceStatusItem.IOptions) {
    super();
    this._model = options.model;
    this._figure = options.figure ?? 'busiest';
    this._enabled = options.enabled ?? true;
    this._trans = options.trans ?? NULL_BUNDLE;
    this.addClass(STATUS_ITEM_CLASS);
    this.addClass('jp-mod-highlighted');
    this.node.tabIndex = 0;
    this.node.setAttribute('role', 'button');
    this.node.addEventListener('click', () => options.onActivate());
    this.node.addEventListener('keydown', (event: KeyboardEvent) => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        options.onActivate();
      }
    });
    this._active = this.isActive();
    this._model.changed.connect(this._update, this);
    this._update();
  }

  /** Emitted when `isActive()` changes (the status bar shows or hides it). */
  get activeStateChanged(): ISignal<this, void> {
    return this._activeStateChanged;
  }

  /** The user wants it and the server has shown at least one device. */
  isActive(): boolean {
    return this._enabled && (this._model.glance?.devices.length ?? 0) > 0;
  }

  get figure(): StatusFigure {
    return this._figure;
  }

  set figure(value: StatusFigure) {
    if (value !== this._figure) {
      this._figure = value;
      this._update();
    }
  }

  get enabled(): boolean {
    return this._enabled;
  }

  set enabled(value: boolean) {
    if (value !== this._enabled) {
      this._enabled = value;
      this._update();
    }
  }

  dispose(): void {
    Signal.clearData(this);
    super.dispose();
  }

  private _update(): void {
    const state = this._model.state;
    const now = this._model.now();
    const text = statusText(state, this._figure, now, this._trans);
    setText(this.node, text);
    this.node.title = statusTooltip(state, now, this._trans);
    setAttr(
      this.node,
      'aria-label',
      this._trans.__('%1. Open the GPU dashboards', text)
    );
    this.toggleClass('nvdashboard-mod-stale', this._model.stale);
    const active = this.isActive();
    if (active !== this._active) {
      this._active = active;
      this._activeStateChanged.emit();
    }
  }

  private _model: GlanceModel;
  private _figure: StatusFigure;
  private _enabled: boolean;
  private _trans: TranslationBundle;
  private _active: boolean;
  private _activeStateChanged = new Signal<this, void>(this);
}

export namespace GlancePanel {
  export interface IOptions {
    model: GlanceModel;
    /** Ask the user; resolve true to go ahead. */
    confirm: (title: string, body: string) => Promise<boolean>;
    /** Shut the kernel down through JupyterLab's kernel API. */
    shutdownKernel: (kernelId: string) => Promise<void>;
    /** Say that something failed (JupyterLab's error dialog). */
    showError?: (title: string, error: unknown) => Promise<void> | void;
    /** Whether this Jupyter server runs the kernel (only those can be shut down here). */
    isLocalKernel?: (kernelId: string) => boolean;
    /** Emitted when this server's kernels change. */
    localKernelsChanged?: ISignal<unknown, unknown>;
    /** Open a notebook path in JupyterLab. */
    openPath?: (path: string) => void;
    trans?: TranslationBundle;
  }
}

/** A meter: `role="meter"` with its value, a fill and a label on it. */
class Meter {
  constructor(kind: string) {
    this.node = element(
      'div',
      `nvdashboard-bar nvdashboard-bar-${kind}`,
      undefined,
      {
        role: 'meter',
        'aria-valuemin': '0',
        'aria-valuemax': '100'
      }
    );
    this._fill = element('div', 'nvdashboard-bar-fill');
    this._text = element('span', 'nvdashboard-bar-text', undefined, {
      'aria-hidden': 'true'
    });
    this.node.append(this._fill, this._text);
  }

  readonly node: HTMLElement;

  /** `fraction` in [0, 1] or null (not available). */
  set(
    name: string,
    fraction: number | null,
    text: string,
    full: string = text
  ): void {
    const pct =
      fraction === null ? null : Math.max(0, Math.min(1, fraction)) * 100;
    const width = `${(pct ?? 0).toFixed(1)}%`;
    if (this._fill.style.width !== width) {
      this._fill.style.width = width;
    }
    this.node.dataset.value = pct === null ? '' : pct.toFixed(1);
    setAttr(this.node, 'aria-label', name);
    setAttr(this.node, 'aria-valuenow', pct === null ? null : pct.toFixed(0));
    setAttr(this.node, 'aria-valuetext', full);
    setAttr(this.node, 'title', `${name}: ${full}`);
    setText(this._text, text);
  }

  private _fill: HTMLElement;
  private _text: HTMLElement;
}

/** One device's row: label, utilization and memory meters. */
class DeviceRow {
  constructor() {
    this.node = element('div', 'nvdashboard-glance-device');
    this.node.append(this._label, this._util.node, this._memory.node);
  }

  readonly node: HTMLElement;

  update(d: IGlanceDevice, trans: TranslationBundle): void {
    this.node.className = `nvdashboard-glance-device nvdashboard-kind-${d.kind}`;
    this.node.dataset.index = String(d.index);
    setText(this._label, d.label);
    this._util.set(
      trans.__('%1 utilization', d.label),
      d.utilization_pct === null ? null : d.utilization_pct / 100,
      d.utilization_pct === null
        ? trans.__('util n/a')
        : `${Math.round(d.utilization_pct)}%`
    );
    const total =
      d.memory_total_bytes !== null
        ? ` / ${formatBytes(d.memory_total_bytes)}`
        : '';
    const used =
      d.memory_used_bytes === null
        ? trans.__('n/a')
        : formatBytes(d.memory_used_bytes);
    // The bar shows what fits (used); its name and tooltip say "of total".
    this._memory.set(
      trans.__('%1 memory used', d.label),
      memoryFraction(d),
      used,
      used + total
    );
  }

  private _label = element('span', 'nvdashboard-glance-label');
  private _util = new Meter('util');
  private _memory = new Meter('memory');
}

/** One kernel's row, kept across refreshes so its buttons keep focus. */
class KernelRow {
  constructor(
    id: string,
    onOpen: (row: KernelRow) => void,
    onStop: (row: KernelRow) => void
  ) {
    this.node = element('li', KERNEL_ROW_CLASS);
    this.node.dataset.kernelId = id;
    this._name.type = 'button';
    this._name.addEventListener('click', () => onOpen(this));
    this._stop.type = 'button';
    this._stop.addEventListener('click', () => onStop(this));
    this.node.append(this._name, this._detail, this._stop, this._elsewhere);
  }

  readonly node: HTMLElement;
  kernel: IGpuKernel | null = null;

  update(
    kernel: IGpuKernel,
    local: boolean,
    stopping: boolean,
    trans: TranslationBundle
  ): void {
    this.kernel = kernel;
    setText(this._name, kernel.path);
    setAttr(this._name, 'title', trans.__('Open %1', kernel.path));
    setAttr(this._name, 'aria-label', trans.__('Open %1', kernel.path));
    const memory = kernel.memory_known
      ? formatBytes(kernel.memory_bytes)
      : `${formatBytes(kernel.memory_bytes)}+`;
    setText(
      this._detail,
      trans.__('%1 on %2', memory, kernel.devices.join(', '))
    );
    this._stop.hidden = !local;
    this._elsewhere.hidden = local;
    setText(this._elsewhere, trans.__('runs under another Jupyter server'));
    setText(
      this._stop,
      stopping ? trans.__('Shutting down…') : trans.__('Shut down')
    );
    setAttr(
      this._stop,
      'aria-label',
      trans.__('Shut down the kernel of %1', kernel.path)
    );
    this._stop.disabled = stopping;
  }

  private _name = element('button', 'nvdashboard-kernel-path jp-mod-styled');
  private _detail = element('span', 'nvdashboard-kernel-memory');
  private _stop = element(
    'button',
    'nvdashboard-kernel-shutdown jp-mod-styled'
  );
  private _elsewhere = element('span', 'nvdashboard-kernel-elsewhere');
}

/**
 * The sidebar's live section: "Your GPU kernels" first (what the user can
 * act on stays on screen), then each device's utilization and memory as
 * meters, then why the GPUs of the user's kernels are slow.
 */
export class GlancePanel extends RenderOnShow {
  constructor(options: GlancePanel.IOptions) {
    super();
    this._options = options;
    this._trans = options.trans ?? NULL_BUNDLE;
    const trans = this._trans;
    this.addClass(GLANCE_CLASS);
    this._stale = element('div', STALE_CLASS, undefined, { role: 'status' });
    this._kernelsHeading = element(
      'h3',
      'nvdashboard-sidebar-header',
      trans.__('Your GPU kernels')
    );
    this._kernelList = element('ul', 'nvdashboard-kernels');
    this._empty = element(
      'li',
      'nvdashboard-empty',
      trans.__('None of your kernels holds GPU memory.')
    );
    this._devicesHeading = element(
      'h3',
      'nvdashboard-sidebar-header',
      trans.__('GPUs now')
    );
    this._devices = element('div', 'nvdashboard-glance-devices');
    this._whyHeading = element(
      'h3',
      'nvdashboard-sidebar-header',
      trans.__('Why your GPUs are slow')
    );
    this._why = element('ul', DIAGNOSIS_CLASS);
    this.node.append(
      this._stale,
      this._kernelsHeading,
      this._kernelList,
      this._devicesHeading,
      this._devices,
      this._whyHeading,
      this._why
    );
    options.model.changed.connect(this.invalidate, this);
    options.localKernelsChanged?.connect(this.invalidate, this);
  }

  /** The model this section shows. */
  get model(): GlanceModel {
    return this._options.model;
  }

  /** Kernel ids being shut down now (their buttons are disabled). */
  get stopping(): ReadonlySet<string> {
    return this._stopping;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    Signal.disconnectReceiver(this);
    super.dispose();
  }

  protected render(): void {
    const { model } = this._options;
    const state = model.state;
    const glance = state.glance;
    const trans = this._trans;
    const stale = staleWords(state, model.now(), trans);
    this.toggleClass('nvdashboard-mod-stale', stale !== null);
    this._stale.hidden = stale === null;
    setText(
      this._stale,
      stale === null
        ? ''
        : trans.__(
            'GPU readings %1: the dashboard server did not answer (%2).',
            stale,
            state.error ?? ''
          )
    );
    const known = glance !== null;
    for (const node of [
      this._kernelsHeading,
      this._kernelList,
      this._devicesHeading,
      this._devices
    ]) {
      node.hidden = !known;
    }
    this._renderKernels(glance?.kernels ?? []);
    this._renderDevices(glance?.devices ?? []);
    this._renderDiagnoses(glance?.diagnoses ?? []);
  }

  private _renderKernels(kernels: IGpuKernel[]): void {
    const isLocal = this._options.isLocalKernel ?? (() => true);
    const seen = new Set<string>();
    const wanted: HTMLElement[] = [];
    for (const kernel of kernels) {
      seen.add(kernel.kernel_id);
      let row = this._rows.get(kernel.kernel_id);
      if (!row) {
        row = new KernelRow(
          kernel.kernel_id,
          r => r.kernel && this._options.openPath?.(r.kernel.path),
          r => r.kernel && void this._shutdown(r.kernel)
        );
        this._rows.set(kernel.kernel_id, row);
      }
      row.update(
        kernel,
        isLocal(kernel.kernel_id),
        this._stopping.has(kernel.kernel_id),
        this._trans
      );
      wanted.push(row.node);
    }
    for (const [id, row] of this._rows) {
      if (!seen.has(id)) {
        row.node.remove();
        this._rows.delete(id);
      }
    }
    if (wanted.length === 0) {
      wanted.push(this._empty);
    } else {
      this._empty.remove();
    }
    placeInOrder(this._kernelList, wanted);
  }

  private _renderDevices(devices: IGlanceDevice[]): void {
    const seen = new Set<number>();
    const wanted: HTMLElement[] = [];
    for (const d of devices) {
      seen.add(d.index);
      let row = this._deviceRows.get(d.index);
      if (!row) {
        row = new DeviceRow();
        this._deviceRows.set(d.index, row);
      }
      row.update(d, this._trans);
      wanted.push(row.node);
    }
    for (const [index, row] of this._deviceRows) {
      if (!seen.has(index)) {
        row.node.remove();
        this._deviceRows.delete(index);
      }
    }
    placeInOrder(this._devices, wanted);
  }

  private _renderDiagnoses(diagnoses: IGlanceDiagnosis[]): void {
    this._whyHeading.hidden = this._why.hidden = diagnoses.length === 0;
    const key = JSON.stringify(diagnoses);
    if (key === this._whyKey) {
      return; // nothing in this list takes focus; redraw it only on a change
    }
    this._whyKey = key;
    this._why.replaceChildren(
      ...diagnoses.map(d => {
        const item = element('li', 'nvdashboard-diagnosis-line', d.line);
        item.dataset.cause = d.cause;
        if (d.advice) {
          item.append(
            element(
              'div',
              'nvdashboard-diagnosis-advice',
              this._trans.__('Try: %1.', d.advice)
            )
          );
        }
        return item;
      })
    );
  }

  private async _shutdown(kernel: IGpuKernel): Promise<void> {
    const trans = this._trans;
    const id = kernel.kernel_id;
    if (this._stopping.has(id)) {
      return;
    }
    try {
      const ok = await this._options.confirm(
        trans.__('Shut down kernel?'),
        trans.__(
          'Shut down the kernel of %1? It frees %2 of GPU memory; unsaved variables are lost.',
          kernel.path,
          formatBytes(kernel.memory_bytes)
        )
      );
      if (!ok) {
        return;
      }
      this._stopping.add(id);
      this.invalidate();
      try {
        await this._options.shutdownKernel(id);
      } catch (error) {
        this._stopping.delete(id);
        this.invalidate();
        await this._options.showError?.(
          trans.__('Could not shut down the kernel of %1', kernel.path),
          error
        );
        return;
      }
      // The row stays "shutting down" until an answer asked for after the
      // shutdown arrives; an answer already on its way cannot bring it back.
      await this._options.model.refresh().catch(() => undefined);
      this._stopping.delete(id);
      this.invalidate();
    } catch (error) {
      this._stopping.delete(id);
      await this._options.showError?.(
        trans.__('Could not shut down the kernel of %1', kernel.path),
        error
      );
    }
  }

  private _options: GlancePanel.IOptions;
  private _trans: TranslationBundle;
  private _stopping = new Set<string>();
  private _rows = new Map<string, KernelRow>();
  private _deviceRows = new Map<number, DeviceRow>();
  private _whyKey = '';
  private _stale: HTMLElement;
  private _kernelsHeading: HTMLElement;
  private _kernelList: HTMLElement;
  private _empty: HTMLElement;
  private _devicesHeading: HTMLElement;
  private _devices: HTMLElement;
  private _whyHeading: HTMLElement;
  private _why: HTMLElement;
}
