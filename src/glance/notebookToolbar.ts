/**
 * The notebook's own GPU state in its toolbar: `GPU 1 · 12.3 GiB · kernel
 * 87%` while its kernel holds GPU memory (the kernel's own share, by the
 * server's rule; where that cannot be told, the GPU's utilization, named as
 * the GPU's: `GPU 95%`), `idle on GPU for 42 min` when the server judges it
 * an idle holder, nothing when it holds no GPU. It reads the one
 * `GlanceModel` (the sidebar's and the status bar's poll) while its notebook
 * is on screen, and says it in their words. It is reached with Tab, its
 * accessible name carries the figures and the sentence, and it is not a
 * live region: a reading every 2 s is not announced.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { setAttr, setText } from '../shared/dom';
import { IGlance } from './glance';
import { GlanceModel } from './glanceModel';
import { formatPercent, kernelMemoryText, NULL_BUNDLE } from '../shared/format';
import {
  DEFAULT_NOTICE_SETTINGS,
  idleWords,
  IIdleThresholds,
  userThresholds
} from './idleRule';

/** Class of the toolbar item (tests and browser tests find it by it). */
export const KERNEL_GPU_CLASS = 'nvdashboard-kernel-gpu';

/** What the item says and its tooltip; null when the kernel holds no GPU. */
export interface IKernelGpuWords {
  text: string;
  tooltip: string;
}

/**
 * The kernel's GPU state in a few words: its GPUs, the memory it holds and
 * each of its GPUs' utilization, or how long it has been idle on them.
 */
export function kernelGpuWords(
  glance: IGlance | null,
  kernelId: string | null,
  thresholds: IIdleThresholds,
  trans: TranslationBundle = NULL_BUNDLE
): IKernelGpuWords | null {
  const kernel =
    kernelId === null
      ? undefined
      : glance?.kernels.find(k => k.kernel_id === kernelId);
  if (!glance || !kernel) {
    return null;
  }
  const memory = kernelMemoryText(kernel, trans);
  const held = trans.__(
    '%1 on %2',
    memory,
    kernel.devices.join(trans.__(', '))
  );
  const tooltip = kernel.idle?.text
    ? trans.__('This notebook’s kernel holds %1. %2', held, kernel.idle.text)
    : trans.__('This notebook’s kernel holds %1.', held);
  const idle = idleWords(kernel, thresholds, trans);
  if (idle !== null) {
    return { text: idle, tooltip };
  }
  // The kernel's devices are named as the sidebar names them, with how CUDA
  // numbers them (`GPU 1 (CUDA 1)`); the item says the device's own label.
  const devices = kernel.devices.map(name =>
    glance.devices.find(
      d => name === d.label || name.startsWith(`${d.label} (`)
    )
  );
  const gpus = devices
    .map((d, i) => d?.label ?? kernel.devices[i])
    .join(trans.__(', '));
  if (kernel.own_pct !== null) {
    // The kernel's own share: the one figure that speaks for this notebook.
    return {
      text: trans.__(
        '%1 · %2 · kernel %3',
        gpus,
        memory,
        formatPercent(kernel.own_pct, trans)
      ),
      tooltip: trans.__(
        '%1 Its own GPU activity: %2 (%3).',
        tooltip,
        formatPercent(kernel.own_pct, trans),
        kernel.own_signal
      )
    };
  }
  // Its own share cannot be told (a shared GPU without per-process
  // samples): the GPUs' utilization, said to be theirs, not the kernel's.
  const utilization = devices
    .map(d => formatPercent(d?.utilization_pct ?? null, trans))
    .join(' ');
  return {
    text: trans.__(
      '%1 · %2 · %3 %4',
      gpus,
      memory,
      trans._n('GPU', 'GPUs', devices.length),
      utilization
    ),
    tooltip: trans.__(
      '%1 The utilization shown is the whole GPU’s: the kernel’s own share cannot be told.',
      tooltip
    )
  };
}

export namespace KernelGpuItem {
  export interface IOptions {
    model: GlanceModel;
    /** The notebook's kernel id now (null: no kernel). */
    kernelId: () => string | null;
    trans?: TranslationBundle;
  }
}

/**
 * The toolbar item. It asks the shared poll for readings only while its
 * notebook is on screen and the user wants it.
 */
export class KernelGpuItem extends Widget {
  constructor(options: KernelGpuItem.IOptions) {
    super();
    this._options = options;
    this._trans = options.trans ?? NULL_BUNDLE;
    this.addClass(KERNEL_GPU_CLASS);
    // Focusable and named by its figures; a note, not a live region.
    this.node.setAttribute('role', 'note');
    this.node.tabIndex = 0;
    options.model.changed.connect(this.refresh, this);
    this.refresh();
  }

  /** Whether the user wants it (a setting); off, it is hidden and reads nothing. */
  get enabled(): boolean {
    return this._enabled;
  }

  set enabled(value: boolean) {
    this._enabled = value;
    this._use();
    this.refresh();
  }

  /** Which kernels it calls idle (the user's notice thresholds). */
  set idleThresholds(value: IIdleThresholds) {
    this._thresholds = value;
    this.refresh();
  }

  /** Say what the last reading says (also when the kernel changed). */
  refresh(): void {
    if (this.isDisposed) {
      return;
    }
    const words = this._enabled
      ? kernelGpuWords(
          this._options.model.glance,
          this._options.kernelId(),
          this._thresholds,
          this._trans
        )
      : null;
    this.node.hidden = words === null;
    setText(this.node, words?.text ?? '');
    setAttr(this.node, 'title', words?.tooltip ?? null);
    setAttr(
      this.node,
      'aria-label',
      words ? this._trans.__('%1. %2', words.text, words.tooltip) : null
    );
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._options.model.use(this, false);
    this._options.model.changed.disconnect(this.refresh, this);
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._use();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._use();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._use();
  }

  protected onBeforeDetach(msg: Message): void {
    this._options.model.use(this, false);
    super.onBeforeDetach(msg);
  }

  /**
   * Read the glance while the notebook is on screen. An item with nothing
   * to say hides its node only, so it stays "visible" to Lumino and hears
   * when its kernel comes to hold a GPU.
   */
  private _use(): void {
    this._options.model.use(this, this._enabled && this.isVisible);
  }

  private _options: KernelGpuItem.IOptions;
  private _trans: TranslationBundle;
  private _enabled = true;
  private _thresholds: IIdleThresholds = userThresholds(
    DEFAULT_NOTICE_SETTINGS
  );
}
