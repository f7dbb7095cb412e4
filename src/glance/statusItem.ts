/**
 * The status-bar item: the user's GPU, else how many GPUs are free (or each
 * GPU) in a few characters,
 * a button that opens the sidebar, reading the one `GlanceModel`.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { setAttr, setClass, setText } from '../shared/dom';
import {
  IGlanceState,
  STATUS_ITEM_CLASS,
  statusText,
  statusTooltip,
  StatusFigure
} from './glance';
import { GlanceModel } from './glanceModel';
import { NULL_BUNDLE } from '../shared/format';

/**
 * The state of the item's reading in words (live, stale, unreachable, no
 * GPU, waiting), with no figure or age in them: they change only when the
 * state does.
 */
export function readingStateWords(
  state: IGlanceState,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  if (state.error !== null) {
    return state.readAt === null
      ? trans.__('server unreachable')
      : trans.__('readings stale');
  }
  if (state.glance === null) {
    return trans.__('waiting for the first reading');
  }
  return state.glance.devices.length ? trans.__('live') : trans.__('no GPU');
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
    this._figure = options.figure ?? 'summary';
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

  /**
   * Whether this item needs the glance polled: while the user wants it,
   * unless the server said, in a way that will not change by itself, that
   * there is nothing to show (no GPU, no dashboard server: a 404). The
   * sidebar, when opened, asks again.
   */
  get needsGlance(): boolean {
    return this._enabled && (this.isActive() || !this._model.stuck);
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

  // Setting a value it has changes nothing: _update only writes what differs.
  set figure(value: StatusFigure) {
    this._figure = value;
    this._update();
  }

  get enabled(): boolean {
    return this._enabled;
  }

  set enabled(value: boolean) {
    this._enabled = value;
    this._update();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.use(this, false);
    Signal.clearData(this);
    super.dispose();
  }

  private _update(): void {
    const state = this._model.state;
    const now = this._model.now();
    const text = statusText(state, this._figure, now, this._trans);
    setText(this.node, text);
    setAttr(this.node, 'title', statusTooltip(state, now, this._trans));
    // The name says the state, not the figures: a name that changed at every
    // poll was read out again and again. The figures are the item's text and
    // its title (its description).
    setAttr(
      this.node,
      'aria-label',
      this._trans.__(
        'GPU status: %1. Open the GPU dashboards',
        readingStateWords(state, this._trans)
      )
    );
    setClass(this.node, 'nvdashboard-mod-stale', this._model.stale);
    const active = this.isActive();
    if (active !== this._active) {
      this._active = active;
      this._activeStateChanged.emit();
    }
    this._model.use(this, this.needsGlance);
  }

  private _model: GlanceModel;
  private _figure: StatusFigure;
  private _enabled: boolean;
  private _trans: TranslationBundle;
  private _active: boolean;
  private _activeStateChanged = new Signal<this, void>(this);
}
