/**
 * The hint that says how to keep the cell footers that a reload dropped
 * (issue 53, item 9).
 *
 * A footer lives in the page only unless the `saveCellFooter` setting is on,
 * so a reload of JupyterLab (or a notebook closed and opened again) drops
 * every footer its cells had. `FooterHints` remembers, in the state
 * database, which cells of which notebooks showed a footer that was not
 * saved. When such a notebook is opened again with footers on and saving
 * off, the first of those cells (in the notebook's order: the first
 * footer's place) gets the hint, naming the setting that keeps footers.
 *
 * Once: at most one hint per Lab session (page load), whatever the
 * notebooks opened; each drop is told at most once (its record goes when the
 * notebook is opened again); Dismiss ends it for good (kept in the state
 * database). Turning saving on, or running the hinted cell again, removes
 * it. The hint is a plain note (no live region: nothing is announced on its
 * own) with two buttons the keyboard reaches, Open Settings and Dismiss.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { JSONObject } from '@lumino/coreutils';
import { Widget } from '@lumino/widgets';

import { element } from '../shared/dom';
import { NULL_BUNDLE } from '../shared/format';

/** Class of the hint (tests and browser tests find it by it). */
export const FOOTER_HINT_CLASS = 'nvdashboard-footer-hint';

/** Where the hint's state is kept in the state database. */
export const HINT_STATE_ID = 'jupyterlab-nvdashboard:footer-hint';

/** The notebooks remembered, and the cells remembered of each (the newest). */
export const MAX_NOTEBOOKS = 20;
export const MAX_CELLS = 50;

/**
 * The setting's title, as schema/plugin.json names it (the hint's words
 * name it too): the settings editor opens filtered on it.
 */
export const SAVE_SETTING_TITLE = 'Save the GPU footers into the notebook file';

/** Where the state is kept (a subset of `IStateDB`). */
export interface IHintStore {
  fetch(id: string): Promise<unknown>;
  save(id: string, value: JSONObject): Promise<unknown>;
}

/** What is kept: whether the hint was dismissed; per notebook, its cells with a footer not saved. */
export interface IHintState {
  dismissed: boolean;
  notebooks: { [path: string]: string[] };
}

/** The kept state, validated; anything odd reads as nothing kept. */
export function hintState(value: unknown): IHintState {
  const v = (value ?? {}) as Record<string, unknown>;
  const notebooks: { [path: string]: string[] } = {};
  const kept = (v.notebooks ?? {}) as Record<string, unknown>;
  if (typeof kept === 'object' && !Array.isArray(kept)) {
    for (const [path, ids] of Object.entries(kept)) {
      if (Array.isArray(ids)) {
        const cells = ids.filter((id): id is string => typeof id === 'string');
        if (cells.length) {
          notebooks[path] = cells.slice(-MAX_CELLS);
        }
      }
    }
  }
  return { dismissed: v.dismissed === true, notebooks };
}

export namespace FooterHints {
  export interface IOptions {
    store: IHintStore;
    /** Open the settings editor at the setting; absent: no such button. */
    openSettings?: () => void;
    /** Whether `openSettings` can run now (the settings editor is there). */
    canOpenSettings?: () => boolean;
    trans?: TranslationBundle;
  }
}

/** The once-only logic (see the module comment); one per Lab. */
export class FooterHints {
  constructor(options: FooterHints.IOptions) {
    this._options = options;
    this._store = options.store;
  }

  /** A new hint widget, whose Dismiss ends the hint for good. */
  createHint(): FooterHint {
    const { openSettings, canOpenSettings, trans } = this._options;
    const settings =
      openSettings && (canOpenSettings?.() ?? true) ? openSettings : undefined;
    return new FooterHint({
      dismiss: () => void this.dismiss(),
      openSettings: settings,
      trans
    });
  }

  /** Whether a hint was given in this Lab session. */
  get hinted(): boolean {
    return this._hinted;
  }

  /**
   * A view of this notebook opened: whether it is the only one (a second
   * view of an open notebook drops nothing: the first still has its footers).
   */
  opened(path: string): boolean {
    const views = (this._views.get(path) ?? 0) + 1;
    this._views.set(path, views);
    return views === 1;
  }

  /** A view of this notebook closed. */
  closed(path: string): void {
    const views = (this._views.get(path) ?? 1) - 1;
    if (views > 0) {
      this._views.set(path, views);
    } else {
      this._views.delete(path);
    }
  }

  /** A footer was shown under this cell and not saved: a reload drops it. */
  footerShown(path: string, cellId: string): Promise<void> {
    return this._queued(async state => {
      const cells = state.notebooks[path] ?? [];
      if (cells.includes(cellId)) {
        return false;
      }
      delete state.notebooks[path]; // re-added last: the newest notebook
      state.notebooks[path] = [...cells, cellId].slice(-MAX_CELLS);
      const paths = Object.keys(state.notebooks);
      for (const old of paths.slice(
        0,
        Math.max(0, paths.length - MAX_NOTEBOOKS)
      )) {
        delete state.notebooks[old];
      }
      return true;
    });
  }

  /**
   * A notebook was opened (its first view, `opened`): the cell whose footer
   * place gets the hint, or null. `cellIds` are its cells in order; `wanted`
   * is false where the hint would not apply (footers off, or saved). What
   * was kept of the notebook goes either way: each drop is told once.
   */
  hintFor(
    path: string,
    cellIds: ReadonlyArray<string>,
    wanted: boolean
  ): Promise<string | null> {
    let cell: string | null = null;
    return this._queued(async state => {
      const cells = state.notebooks[path];
      if (cells === undefined) {
        return false;
      }
      delete state.notebooks[path];
      if (wanted && !this._hinted && !state.dismissed) {
        cell = cellIds.find(id => cells.includes(id)) ?? null;
        this._hinted = cell !== null;
      }
      return true;
    }).then(() => cell);
  }

  /** The user dismissed the hint: it is not given again. */
  dismiss(): Promise<void> {
    return this._queued(async state => {
      if (state.dismissed) {
        return false;
      }
      state.dismissed = true;
      return true;
    });
  }

  /** Run `change` on the state, in order; save it when it says it changed. */
  private _queued(
    change: (state: IHintState) => Promise<boolean>
  ): Promise<void> {
    this._queue = this._queue.then(async () => {
      if (this._state === null) {
        try {
          this._state = hintState(await this._store.fetch(HINT_STATE_ID));
        } catch {
          this._state = hintState(null);
        }
      }
      if (await change(this._state)) {
        await this._store
          .save(HINT_STATE_ID, {
            dismissed: this._state.dismissed,
            notebooks: { ...this._state.notebooks }
          })
          .catch(reason =>
            console.warn('nvdashboard: the footer hint was not saved', reason)
          );
      }
    });
    return this._queue;
  }

  private _options: FooterHints.IOptions;
  private _store: IHintStore;
  private _state: IHintState | null = null;
  private _queue: Promise<void> = Promise.resolve();
  private _hinted = false;
  private _views = new Map<string, number>();
}

export namespace FooterHint {
  export interface IOptions {
    /** The user pressed Dismiss (the widget disposes itself after). */
    dismiss: () => void;
    /** Open the settings at the setting; absent: no such button. */
    openSettings?: () => void;
    trans?: TranslationBundle;
  }
}

/** The hint itself, in a cell's footer place. */
export class FooterHint extends Widget {
  constructor(options: FooterHint.IOptions) {
    super();
    const trans = options.trans ?? NULL_BUNDLE;
    this.addClass(FOOTER_HINT_CLASS);
    // A note, not a live region: it is read where it stands, never announced.
    this.node.setAttribute('role', 'note');
    // Enter and Space on its buttons are theirs, not the notebook's.
    this.node.setAttribute('data-lm-suppress-shortcuts', 'true');
    const text = element(
      'span',
      'nvdashboard-footer-hint-text',
      trans.__(
        'The GPU footers of earlier runs were not kept when this notebook was opened again. To keep them, turn on “Save the GPU footers into the notebook file” in Settings › GPU Dashboards.'
      )
    );
    this.node.append(text);
    if (options.openSettings) {
      const open = options.openSettings;
      const button = element(
        'button',
        'nvdashboard-footer-hint-button jp-mod-styled',
        trans.__('Open Settings'),
        { type: 'button' }
      );
      button.addEventListener('click', () => open());
      this.node.append(button);
    }
    const dismiss = element(
      'button',
      'nvdashboard-footer-hint-button jp-mod-styled',
      trans.__('Dismiss'),
      {
        type: 'button',
        'aria-label': trans.__('Dismiss the hint about keeping GPU footers')
      }
    );
    dismiss.addEventListener('click', () => {
      options.dismiss();
      this.dispose();
    });
    this.node.append(dismiss);
  }
}
