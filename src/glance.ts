/**
 * GPUs at a glance: the status-bar item, the sidebar's live bars and the
 * "Your GPU kernels" list all read `{base}nvdashboard/glance.json`, through
 * one `GlanceModel` that polls it only while JupyterLab is visible.
 *
 * Shutting a kernel down goes through JupyterLab's own kernel API with the
 * user's credentials, after a confirmation; the dashboard server never stops
 * anything itself.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

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

/** How often the glance is polled while JupyterLab is visible (ms). */
export const GLANCE_INTERVAL_MS = 2000;

/** Sidebar section classes (tests and browser tests find them by these). */
export const GLANCE_CLASS = 'nvdashboard-glance';
export const KERNEL_ROW_CLASS = 'nvdashboard-kernel';
export const STATUS_ITEM_CLASS = 'nvdashboard-statusbar-item';
export const DIAGNOSIS_CLASS = 'nvdashboard-diagnoses';

function numberOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

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

/** The status bar's tooltip: what it shows, and why the GPUs of your kernels are slow. */
export function statusTooltip(glance: IGlance | null): string {
  const base = 'GPU utilization and memory (click for GPU dashboards)';
  if (!glance || glance.diagnoses.length === 0) {
    return base;
  }
  const lines = glance.diagnoses.map(
    d => `${d.line}${d.advice ? ` Try: ${d.advice}.` : ''}`
  );
  return [base, 'The GPUs of your kernels:', ...lines].join('\n');
}

/** Bytes as decimal GB, the unit the dashboards use. */
export function formatGB(bytes: number | null): string {
  if (bytes === null) {
    return 'n/a';
  }
  const gb = bytes / 1e9;
  return `${gb >= 10 ? gb.toFixed(0) : gb.toFixed(1)} GB`;
}

/**
 * A few characters for the status bar: mean utilization of the physical
 * GPUs and memory used of total, e.g. `GPU 45% · 12/80 GB`.
 */
export function statusText(glance: IGlance | null): string {
  if (!glance || glance.devices.length === 0) {
    return 'GPU –';
  }
  const gpus = glance.devices.filter(d => d.kind === 'gpu');
  const shown = gpus.length ? gpus : glance.devices;
  const utils = shown
    .map(d => d.utilization_pct)
    .filter((u): u is number => u !== null);
  const util = utils.length
    ? `${Math.round(utils.reduce((a, b) => a + b, 0) / utils.length)}%`
    : 'n/a';
  let used = 0;
  let total = 0;
  let known = false;
  for (const d of shown) {
    if (d.memory_used_bytes !== null && d.memory_total_bytes) {
      used += d.memory_used_bytes;
      total += d.memory_total_bytes;
      known = true;
    }
  }
  const memory = known
    ? `${Math.round(used / 1e9)}/${Math.round(total / 1e9)} GB`
    : 'n/a';
  return `GPU ${util} · ${memory}`;
}

export namespace GlanceModel {
  export interface IOptions {
    /** Resolve with `glance.json`'s parsed body. */
    fetch: () => Promise<unknown>;
    interval?: number;
    /** When the poll pauses; by default while the page is hidden. */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
    autoStart?: boolean;
  }
}

/** The one poll of `glance.json` shared by the status bar and the sidebar. */
export class GlanceModel {
  constructor(options: GlanceModel.IOptions) {
    this._fetch = options.fetch;
    this._poll = new Poll({
      auto: false,
      factory: () => this.refresh(),
      frequency: {
        interval: options.interval ?? GLANCE_INTERVAL_MS,
        backoff: true,
        max: 30 * 1000
      },
      name: 'nvdashboard:glance',
      standby: options.standby ?? 'when-hidden'
    });
    if (options.autoStart !== false) {
      void this._poll.start();
    }
  }

  get glance(): IGlance | null {
    return this._glance;
  }

  get changed(): ISignal<this, IGlance> {
    return this._changed;
  }

  get poll(): Poll {
    return this._poll;
  }

  /** Fetch once now; rejects on failure so the poll backs off. */
  async refresh(): Promise<void> {
    const glance = parseGlance(await this._fetch());
    this._glance = glance;
    this._changed.emit(glance);
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _fetch: () => Promise<unknown>;
  private _poll: Poll;
  private _glance: IGlance | null = null;
  private _changed = new Signal<this, IGlance>(this);
}

/** The status-bar item: a few characters; a click opens the sidebar. */
export class GlanceStatusItem extends Widget {
  constructor(model: GlanceModel, onClick: () => void) {
    super();
    this.addClass(STATUS_ITEM_CLASS);
    this.node.title = statusTooltip(model.glance);
    this.node.textContent = statusText(model.glance);
    this.node.addEventListener('click', onClick);
    model.changed.connect((_, glance) => {
      this.node.textContent = statusText(glance);
      this.node.title = statusTooltip(glance);
    }, this);
  }
}

export namespace GlancePanel {
  export interface IOptions {
    model: GlanceModel;
    /** Ask the user; resolve true to go ahead. */
    confirm: (title: string, body: string) => Promise<boolean>;
    /** Shut the kernel down through JupyterLab's kernel API. */
    shutdownKernel: (kernelId: string) => Promise<void>;
    /** Open a notebook path in JupyterLab. */
    openPath?: (path: string) => void;
  }
}

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function bar(kind: string, fraction: number | null, text: string): HTMLElement {
  const outer = el('div', `nvdashboard-bar nvdashboard-bar-${kind}`);
  outer.title = text;
  const fill = el('div', 'nvdashboard-bar-fill');
  const pct = fraction === null ? 0 : Math.max(0, Math.min(1, fraction)) * 100;
  fill.style.width = `${pct.toFixed(1)}%`;
  outer.dataset.value = fraction === null ? '' : pct.toFixed(1);
  outer.append(fill, el('span', 'nvdashboard-bar-text', text));
  return outer;
}

/**
 * The sidebar section below the dashboard list: each device's utilization
 * and memory as small bars, then "Your GPU kernels" with shutdown buttons.
 */
export class GlancePanel {
  constructor(options: GlancePanel.IOptions) {
    this._options = options;
    this.node = el('section', GLANCE_CLASS);
    options.model.changed.connect((_, glance) => this.render(glance), this);
    this.render(options.model.glance);
  }

  readonly node: HTMLElement;

  /** Kernel ids being shut down now (their buttons are disabled). */
  get stopping(): ReadonlySet<string> {
    return this._stopping;
  }

  render(glance: IGlance | null): void {
    this.node.replaceChildren();
    if (!glance) {
      return;
    }
    const devices = el('div', 'nvdashboard-glance-devices');
    for (const d of glance.devices) {
      const row = el('div', `nvdashboard-glance-device nvdashboard-kind-${d.kind}`);
      row.dataset.index = String(d.index);
      const memory =
        d.memory_used_bytes !== null && d.memory_total_bytes
          ? d.memory_used_bytes / d.memory_total_bytes
          : null;
      row.append(
        el('span', 'nvdashboard-glance-label', d.label),
        bar(
          'util',
          d.utilization_pct === null ? null : d.utilization_pct / 100,
          d.utilization_pct === null
            ? 'util n/a'
            : `${Math.round(d.utilization_pct)}%`
        ),
        bar('memory', memory, formatGB(d.memory_used_bytes))
      );
      devices.append(row);
    }
    const header = el('header', 'nvdashboard-sidebar-header', 'Your GPU kernels');
    const list = el('ul', 'nvdashboard-kernels');
    if (glance.kernels.length === 0) {
      list.append(el('li', 'nvdashboard-empty', 'None of your kernels holds GPU memory.'));
    }
    for (const kernel of glance.kernels) {
      list.append(this._kernelRow(kernel));
    }
    this.node.append(devices, header, list);
    if (glance.diagnoses.length) {
      const why = el('ul', DIAGNOSIS_CLASS);
      for (const d of glance.diagnoses) {
        const item = el('li', 'nvdashboard-diagnosis-line', d.line);
        item.dataset.cause = d.cause;
        if (d.advice) {
          item.append(el('div', 'nvdashboard-diagnosis-advice', `Try: ${d.advice}.`));
        }
        why.append(item);
      }
      this.node.append(
        el('header', 'nvdashboard-sidebar-header', 'Why your GPUs are slow'),
        why
      );
    }
  }

  dispose(): void {
    Signal.clearData(this);
  }

  private _kernelRow(kernel: IGpuKernel): HTMLElement {
    const row = el('li', KERNEL_ROW_CLASS);
    row.dataset.kernelId = kernel.kernel_id;
    const name = el('button', 'nvdashboard-kernel-path jp-mod-styled', kernel.path);
    name.type = 'button';
    name.title = `Open ${kernel.path}`;
    name.addEventListener('click', () => this._options.openPath?.(kernel.path));
    const memory = kernel.memory_known
      ? formatGB(kernel.memory_bytes)
      : `${formatGB(kernel.memory_bytes)}+`;
    const detail = el(
      'span',
      'nvdashboard-kernel-memory',
      `${memory} on ${kernel.devices.join(', ')}`
    );
    const stop = el('button', 'nvdashboard-kernel-shutdown jp-mod-styled', 'Shut down');
    stop.type = 'button';
    stop.disabled = this._stopping.has(kernel.kernel_id);
    stop.addEventListener('click', () => void this._shutdown(kernel));
    row.append(name, detail, stop);
    return row;
  }

  private async _shutdown(kernel: IGpuKernel): Promise<void> {
    const ok = await this._options.confirm(
      'Shut down kernel?',
      `Shut down the kernel of ${kernel.path}? It frees ` +
        `${formatGB(kernel.memory_bytes)} of GPU memory; unsaved variables are lost.`
    );
    if (!ok) {
      return;
    }
    this._stopping.add(kernel.kernel_id);
    this.render(this._options.model.glance);
    try {
      await this._options.shutdownKernel(kernel.kernel_id);
    } finally {
      this._stopping.delete(kernel.kernel_id);
      await this._options.model.refresh().catch(() => undefined);
    }
  }

  private _options: GlancePanel.IOptions;
  private _stopping = new Set<string>();
}
