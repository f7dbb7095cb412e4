/**
 * The sidebar's live section: "Your GPU kernels" first (what the user can
 * act on stays on screen), then each device's utilization and memory as
 * meters, then one short line per GPU on why it is slow, the full finding
 * on hover or a click away.
 *
 * It draws only while shown, and polls the glance only then (with the
 * status item, the model's other user). Rows are kept by kernel id and
 * device index and updated in place, so focus and hover survive a refresh;
 * when the row that had the keyboard goes (its kernel was shut down), the
 * keyboard moves to the next row.
 *
 * Shutting a kernel down goes through JupyterLab's own kernel API with the
 * user's credentials, after a confirmation, and only for kernels this
 * Jupyter server runs; the dashboard server never stops anything itself.
 *
 * Over 400 lines: its three row classes (meter, device, kernel) are this
 * panel's alone and kept in place by it (focus and hover survive a refresh);
 * apart, each would have to expose what only the panel should touch.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { Message } from '@lumino/messaging';
import { ISignal, Signal } from '@lumino/signaling';

import {
  element,
  placeInOrder,
  RenderOnShow,
  setAttr,
  setClass,
  setHidden,
  setText
} from '../shared/dom';
import {
  clockTime,
  formatMemory,
  formatPercent,
  kernelMemoryText,
  memoryUsage,
  NULL_BUNDLE
} from '../shared/format';
import {
  DIAGNOSIS_CLASS,
  GLANCE_CLASS,
  IGlanceDevice,
  IGlanceDiagnosis,
  IGpuKernel,
  KERNEL_ROW_CLASS,
  memoryFraction,
  STALE_CLASS,
  staleWords
} from './glance';
import { GlanceModel } from './glanceModel';
import {
  DEFAULT_NOTICE_SETTINGS,
  idleWords,
  IIdleThresholds,
  userThresholds
} from './idleRule';

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

/**
 * Whose a GPU's finding is, in words, as the server judged it: an idle holder
 * is told it is idle (the finding is not about it); a GPU shared with other
 * processes has the GPU's finding; only where the user's working kernels are
 * all that runs there is it theirs (and only then does it come with advice).
 */
export function whoseFinding(
  d: IGlanceDiagnosis,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const list = (names: string[]): string => names.join(trans.__(', '));
  const parts: string[] = [];
  if (d.idle_kernels.length) {
    parts.push(
      trans._n(
        'Your %2 is idle here: it holds GPU memory and does no GPU work, so this finding is not about it.',
        'Your %2 are idle here: they hold GPU memory and do no GPU work, so this finding is not about them.',
        d.idle_kernels.length,
        list(d.idle_kernels)
      )
    );
  }
  if (d.whose === 'yours') {
    parts.push(
      trans.__(
        'About your %1: nothing else runs on this GPU.',
        list(d.your_kernels)
      )
    );
  } else if (d.other_processes > 0) {
    parts.push(
      trans._n(
        "The GPU's finding, with %1 other process (%2).",
        "The GPU's finding, with %1 other processes (%2).",
        d.other_processes,
        d.other_users.length ? list(d.other_users) : trans.__('user unknown')
      )
    );
  } else if (!d.idle_kernels.length) {
    parts.push(
      trans.__(
        "The GPU's finding: whether your kernels do its work cannot be told."
      )
    );
  }
  return parts.join(' ');
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

  /**
   * `fraction` in [0, 1] or null (not available); `tooltip`: the title, when it
   * says more than the name and the value.
   */
  set(
    name: string,
    fraction: number | null,
    text: string,
    full: string = text,
    tooltip: string = `${name}: ${full}`
  ): void {
    const pct =
      fraction === null ? null : Math.max(0, Math.min(1, fraction)) * 100;
    const width = `${(pct ?? 0).toFixed(1)}%`;
    if (this._fill.style.width !== width) {
      this._fill.style.width = width;
    }
    setAttr(this.node, 'data-value', pct === null ? '' : pct.toFixed(1));
    setAttr(this.node, 'aria-label', name);
    setAttr(this.node, 'aria-valuenow', pct === null ? null : pct.toFixed(0));
    setAttr(this.node, 'aria-valuetext', full);
    setAttr(this.node, 'title', tooltip);
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

  /** `reading`: which reading the meters show ("reading of 09:04:07"), or ''. */
  update(d: IGlanceDevice, reading: string, trans: TranslationBundle): void {
    setAttr(
      this.node,
      'class',
      `nvdashboard-glance-device nvdashboard-kind-${d.kind}`
    );
    setAttr(this.node, 'data-index', String(d.index));
    setText(this._label, d.label);
    const util = formatPercent(d.utilization_pct, trans);
    // The tooltip also says which reading it is; a screen reader hears the
    // value alone (the heading says the reading's time once).
    const tooltip = (name: string, value: string) =>
      reading
        ? trans.__('%1: %2 (%3)', name, value, reading)
        : trans.__('%1: %2', name, value);
    const utilName = trans.__('%1 utilization', d.label);
    this._util.set(
      utilName,
      d.utilization_pct === null ? null : d.utilization_pct / 100,
      d.utilization_pct === null ? trans.__('util n/a') : util,
      util,
      tooltip(utilName, util)
    );
    // The bar shows what fits (used); its name and tooltip say "of total".
    const memoryName = trans.__('%1 memory used', d.label);
    const usage = memoryUsage(d.memory_used_bytes, d.memory_total_bytes, trans);
    this._memory.set(
      memoryName,
      memoryFraction(d),
      formatMemory(d.memory_used_bytes, trans),
      usage,
      tooltip(memoryName, usage)
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
    // The memory line ends with "idle on GPU for 42 min" for an idle holder.
    const line = element('span', 'nvdashboard-kernel-memory');
    line.append(this._detail, this._idle);
    this.node.append(line, this._stop, this._elsewhere);
    this.node.prepend(this._name);
  }

  readonly node: HTMLElement;
  kernel: IGpuKernel | null = null;

  update(
    kernel: IGpuKernel,
    local: boolean,
    stopping: boolean,
    idle: string | null,
    trans: TranslationBundle
  ): void {
    this.kernel = kernel;
    setText(this._name, kernel.path);
    setAttr(this._name, 'title', trans.__('Open %1', kernel.path));
    setAttr(this._name, 'aria-label', trans.__('Open %1', kernel.path));
    setText(
      this._detail,
      trans.__(
        '%1 on %2',
        kernelMemoryText(kernel, trans),
        kernel.devices.join(trans.__(', '))
      )
    );
    // "idle on GPU for 42 min" beside an idle holder, with the judgment's
    // own sentence (its signal and figures) as the tooltip.
    setHidden(this._idle, idle === null);
    setText(this._idle, idle ?? '');
    setAttr(
      this._idle,
      'title',
      idle === null ? null : (kernel.idle?.text ?? null)
    );
    setHidden(this._stop, !local);
    setHidden(this._elsewhere, local);
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

  /** Put the keyboard on this row: its "Shut down" if offered, else its name. */
  focus(): void {
    (this._stop.hidden || this._stop.disabled
      ? this._name
      : this._stop
    ).focus();
  }

  private _name = element('button', 'nvdashboard-kernel-path jp-mod-styled');
  private _detail = element('span', 'nvdashboard-kernel-held');
  private _idle = element('span', 'nvdashboard-kernel-idle');
  private _stop = element(
    'button',
    'nvdashboard-kernel-shutdown jp-mod-styled'
  );
  private _elsewhere = element('span', 'nvdashboard-kernel-elsewhere');
}

/** The sidebar's live section (see the module comment). */
export class GlancePanel extends RenderOnShow {
  constructor(options: GlancePanel.IOptions) {
    super();
    this._options = options;
    this._trans = options.trans ?? NULL_BUNDLE;
    const trans = this._trans;
    this.addClass(GLANCE_CLASS);
    // The stale banner: a live region that speaks when the state changes
    // (stale, or answering again), and beside it, outside the live region,
    // the age and the error, which change at every failed poll.
    this._stale = element('div', STALE_CLASS);
    this._staleSays = element('span', 'nvdashboard-stale-state', undefined, {
      role: 'status'
    });
    this._staleDetail = element('span', 'nvdashboard-stale-detail');
    this._stale.append(this._staleSays, ' ', this._staleDetail);
    this._kernelsHeading = element(
      'h3',
      'nvdashboard-sidebar-header',
      trans.__('Your GPU kernels')
    );
    this._kernelList = element('ul', 'nvdashboard-kernels', undefined, {
      tabindex: '-1'
    });
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
      trans.__('Why the GPUs of your kernels are slow')
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

  /** Which kernels the rows call idle (the user's notice thresholds). */
  get idleThresholds(): IIdleThresholds {
    return this._idleThresholds;
  }

  set idleThresholds(value: IIdleThresholds) {
    this._idleThresholds = value;
    this.invalidate();
  }

  /** Kernel ids being shut down now (their buttons are disabled). */
  get stopping(): ReadonlySet<string> {
    return this._stopping;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._options.model.use(this, false);
    Signal.disconnectReceiver(this);
    super.dispose();
  }

  // The glance is read for this section only while it is on screen.
  protected onAfterAttach(msg: Message): void {
    this._options.model.use(this, this.isVisible);
    super.onAfterAttach(msg);
  }

  protected onAfterShow(msg: Message): void {
    this._options.model.use(this, true);
    super.onAfterShow(msg);
  }

  protected onBeforeHide(msg: Message): void {
    this._options.model.use(this, false);
    super.onBeforeHide(msg);
  }

  protected onBeforeDetach(msg: Message): void {
    this._options.model.use(this, false);
    super.onBeforeDetach(msg);
  }

  protected render(): void {
    const { model } = this._options;
    const state = model.state;
    const glance = state.glance;
    const trans = this._trans;
    const stale = staleWords(state, model.now(), trans);
    setClass(this.node, 'nvdashboard-mod-stale', stale !== null);
    setHidden(this._stale, stale === null);
    // Said once when readings go stale, and not again at each failed poll.
    setText(
      this._staleSays,
      stale === null
        ? ''
        : trans.__(
            'GPU readings are stale: the dashboard server did not answer.'
          )
    );
    setText(
      this._staleDetail,
      stale === null ? '' : trans.__('%1 (%2)', stale, state.error ?? '')
    );
    const known = glance !== null;
    for (const node of [
      this._kernelsHeading,
      this._kernelList,
      this._devicesHeading,
      this._devices
    ]) {
      setHidden(node, !known);
    }
    this._renderKernels(glance?.kernels ?? []);
    // Views update at their own pace (this poll, a page's stream): the meters
    // say which reading they show, as the status bar and /GPU-Memory do.
    const reading =
      glance && glance.time !== null
        ? trans.__('reading of %1', clockTime(glance.time))
        : '';
    setText(
      this._devicesHeading,
      reading ? trans.__('GPUs, %1', reading) : trans.__('GPUs now')
    );
    this._renderDevices(glance?.devices ?? [], reading);
    this._renderDiagnoses(glance?.diagnoses ?? []);
  }

  private _renderKernels(kernels: IGpuKernel[]): void {
    const isLocal = this._options.isLocalKernel ?? (() => true);
    const before = Array.from(this._rows.values());
    const seen = new Set<string>();
    const wanted: HTMLElement[] = [];
    const rows: KernelRow[] = [];
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
        idleWords(kernel, this._idleThresholds, this._trans),
        this._trans
      );
      wanted.push(row.node);
      rows.push(row);
    }
    // The row that had the keyboard, or whose shutdown the user asked for.
    const active = document.activeElement;
    let refocusAt = -1;
    before.forEach((row, position) => {
      const id = row.node.dataset.kernelId ?? '';
      if (seen.has(id)) {
        return;
      }
      if (row.node.contains(active) || id === this._refocus) {
        refocusAt = position;
      }
      row.node.remove();
      this._rows.delete(id);
    });
    if (wanted.length === 0) {
      wanted.push(this._empty);
    } else {
      this._empty.remove();
    }
    placeInOrder(this._kernelList, wanted);
    if (refocusAt >= 0) {
      this._refocus = null;
      const now = document.activeElement;
      // Only where the keyboard was lost with the row (to the page body or
      // this section), never taken from where the user has gone since.
      if (!now || now === document.body || this.node.contains(now)) {
        const next = rows[Math.min(refocusAt, rows.length - 1)];
        if (next) {
          next.focus();
        } else {
          this._kernelList.focus();
        }
      }
    }
  }

  private _renderDevices(devices: IGlanceDevice[], reading: string): void {
    const seen = new Set<number>();
    const wanted: HTMLElement[] = [];
    for (const d of devices) {
      seen.add(d.index);
      let row = this._deviceRows.get(d.index);
      if (!row) {
        row = new DeviceRow();
        this._deviceRows.set(d.index, row);
      }
      row.update(d, reading, this._trans);
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

  /**
   * One short line per GPU (the cause and one figure); the whole finding
   * and what to try are its tooltip, and open below it on a click.
   */
  private _renderDiagnoses(diagnoses: IGlanceDiagnosis[]): void {
    setHidden(this._whyHeading, diagnoses.length === 0);
    setHidden(this._why, diagnoses.length === 0);
    const key = JSON.stringify(diagnoses);
    if (key === this._whyKey) {
      return; // redraw only on a change, so an open one stays open
    }
    this._whyKey = key;
    const open = new Set(
      Array.from(
        this._why.querySelectorAll<HTMLDetailsElement>('details[open]'),
        d => d.dataset.index
      )
    );
    this._why.replaceChildren(
      ...diagnoses.map(d => {
        const whose = whoseFinding(d, this._trans);
        const full = d.advice
          ? this._trans.__('%1 %2 Try: %3.', whose, d.line, d.advice)
          : this._trans.__('%1 %2', whose, d.line);
        const details = element('details', 'nvdashboard-diagnosis');
        details.dataset.index = String(d.index);
        details.dataset.whose = d.whose;
        details.open = open.has(details.dataset.index);
        details.append(
          element('summary', 'nvdashboard-diagnosis-brief', d.brief, {
            title: full
          }),
          element('div', 'nvdashboard-diagnosis-whose', whose),
          element('div', 'nvdashboard-diagnosis-line', d.line)
        );
        if (d.advice) {
          details.append(
            element(
              'div',
              'nvdashboard-diagnosis-advice',
              this._trans.__('Try: %1.', d.advice)
            )
          );
        }
        const item = element('li', 'nvdashboard-diagnosis-item');
        item.dataset.cause = d.cause;
        item.append(details);
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
          formatMemory(kernel.memory_bytes, trans)
        )
      );
      if (!ok) {
        return;
      }
      this._stopping.add(id);
      // When its row goes, the keyboard goes to the next row.
      this._refocus = id;
      this.invalidate();
      try {
        await this._options.shutdownKernel(id);
      } catch (error) {
        this._stopping.delete(id);
        this._refocus = null;
        this.invalidate();
        await this._options.showError?.(
          trans.__('Could not shut down the kernel of %1', kernel.path),
          error
        );
        return;
      }
      // The row stays "shutting down" until an answer asked for after the
      // shutdown arrives; an answer already on its way cannot bring it back.
      await this._options.model.refresh();
      this._stopping.delete(id);
      this.invalidate();
    } catch (error) {
      this._stopping.delete(id);
      this._refocus = null;
      await this._options.showError?.(
        trans.__('Could not shut down the kernel of %1', kernel.path),
        error
      );
    }
  }

  private _options: GlancePanel.IOptions;
  private _trans: TranslationBundle;
  private _stopping = new Set<string>();
  private _idleThresholds = userThresholds(DEFAULT_NOTICE_SETTINGS);
  private _refocus: string | null = null;
  private _rows = new Map<string, KernelRow>();
  private _deviceRows = new Map<number, DeviceRow>();
  private _whyKey = '';
  private _stale: HTMLElement;
  private _staleSays: HTMLElement;
  private _staleDetail: HTMLElement;
  private _kernelsHeading: HTMLElement;
  private _kernelList: HTMLElement;
  private _empty: HTMLElement;
  private _devicesHeading: HTMLElement;
  private _devices: HTMLElement;
  private _whyHeading: HTMLElement;
  private _why: HTMLElement;
}
