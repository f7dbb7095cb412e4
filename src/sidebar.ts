/**
 * The "GPU Dashboards" sidebar: one button per dashboard the server offers,
 * plus the server's GPU status in plain words.
 *
 * It polls `index.json` and `info.json` through an injected fetcher. While
 * the proxied Bokeh server is starting it shows a loading line and retries
 * with backoff; on other failures it shows the error and keeps retrying. The
 * DOM is rebuilt only when what it shows actually changes.
 */
import { CommandRegistry } from '@lumino/commands';
import { JSONExt, JSONObject } from '@lumino/coreutils';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import {
  describeStatus,
  errorMessage,
  IStatusLine,
  isStartingError,
  parseIndex,
  parseInfo
} from './model';
import {
  BUTTON_CLASS,
  COMMAND_OPEN,
  DashboardIndex,
  IDashboardFetcher,
  IServerInfo,
  LOADING_TEXT,
  SIDEBAR_ID,
  SIDEBAR_TITLE,
  STATUS_DETAIL_CLASS,
  STATUS_MIG_CLASS
} from './tokens';

/** Extra CSS class of each kind of status line; MIG lines are indented. */
const LINE_CLASSES: Record<IStatusLine['kind'], string> = {
  note: 'nvdashboard-status-note',
  device: 'nvdashboard-status-device',
  mig: STATUS_MIG_CLASS
};

/** What the sidebar shows. Plain JSON, so changes are found by deep equality. */
export type SidebarState =
  | { kind: 'loading' }
  | { kind: 'error'; message: string }
  | {
      kind: 'ready';
      index: DashboardIndex;
      info: IServerInfo | null;
      infoError: string | null;
    };

/** Poll timing while the list is shown; retries start from `retryInterval`. */
export const DEFAULT_FREQUENCY: IPoll.Frequency = {
  interval: 15 * 1000,
  backoff: true,
  max: 60 * 1000
};

/** First retry delay while the server is starting or failing (then backoff). */
export const DEFAULT_RETRY_INTERVAL = 1000;

export namespace DashboardSidebar {
  export interface IOptions {
    /** Where `index.json` and `info.json` come from. */
    fetcher: IDashboardFetcher;
    /** The registry that holds `nvdashboard:open`. */
    commands: CommandRegistry;
    /** Poll timing once the list is loaded. */
    frequency?: Partial<IPoll.Frequency>;
    /** Poll interval while loading or failing (grows with backoff). */
    retryInterval?: number;
    /** When the poll pauses; defaults to while the page is hidden. */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
    /** Start polling right away (default true). */
    autoStart?: boolean;
  }
}

export class DashboardSidebar extends Widget {
  constructor(options: DashboardSidebar.IOptions) {
    super();
    this.id = SIDEBAR_ID;
    this.title.caption = SIDEBAR_TITLE;
    this.addClass('nvdashboard-sidebar');

    this._fetcher = options.fetcher;
    this._commands = options.commands;
    this._frequency = { ...DEFAULT_FREQUENCY, ...options.frequency };
    const retry = Math.min(
      options.retryInterval ?? DEFAULT_RETRY_INTERVAL,
      this._frequency.max
    );
    this._retryFrequency = { ...this._frequency, interval: retry };

    const header = document.createElement('header');
    header.className = 'nvdashboard-sidebar-header';
    header.textContent = SIDEBAR_TITLE;
    this._body = document.createElement('div');
    this._body.className = 'nvdashboard-sidebar-body';
    this.node.append(header, this._body);
    this._render();

    this._poll = new Poll({
      auto: false,
      factory: () => this._tick(),
      frequency: this._retryFrequency,
      name: 'nvdashboard:index',
      standby: options.standby ?? 'when-hidden'
    });
    if (options.autoStart !== false) {
      void this._poll.start();
    }
  }

  /** What is shown now. */
  get state(): SidebarState {
    return this._state;
  }

  /** The latest dashboard index, or null before the first success. */
  get index(): DashboardIndex | null {
    return this._state.kind === 'ready' ? this._state.index : null;
  }

  /** Emitted when the list of dashboards changes (not on every poll). */
  get indexChanged(): ISignal<this, DashboardIndex> {
    return this._indexChanged;
  }

  /** Emitted whenever the displayed state changes. */
  get stateChanged(): ISignal<this, SidebarState> {
    return this._stateChanged;
  }

  /** How many times the DOM was rebuilt (for tests and debugging). */
  get renderCount(): number {
    return this._renderCount;
  }

  /** The underlying poll (tests and the plugin may refresh it). */
  get poll(): Poll {
    return this._poll;
  }

  /**
   * Fetch once now and update the view. Resolves true when the index was
   * loaded; never rejects.
   */
  async refresh(): Promise<boolean> {
    let index: DashboardIndex;
    try {
      index = parseIndex(await this._fetcher.fetchIndex());
    } catch (error) {
      this._setState(
        isStartingError(error)
          ? { kind: 'loading' }
          : { kind: 'error', message: errorMessage(error) }
      );
      return false;
    }
    let info: IServerInfo | null = null;
    let infoError: string | null = null;
    try {
      info = parseInfo(await this._fetcher.fetchInfo());
    } catch (error) {
      infoError = errorMessage(error);
    }
    this._setState({ kind: 'ready', index, info, infoError });
    return true;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
    super.dispose();
  }

  /** Poll factory: rejecting makes the poll back off before the next try. */
  private async _tick(): Promise<void> {
    const ok = await this.refresh();
    if (this.isDisposed) {
      return;
    }
    this._poll.frequency = ok ? this._frequency : this._retryFrequency;
    if (!ok) {
      throw new Error('nvdashboard: index not available yet');
    }
  }

  private _setState(state: SidebarState): void {
    if (this.isDisposed) {
      return;
    }
    const previous = this._state;
    if (
      JSONExt.deepEqual(
        previous as unknown as JSONObject,
        state as unknown as JSONObject
      )
    ) {
      return;
    }
    this._state = state;
    this._render();
    this._stateChanged.emit(state);
    const before = previous.kind === 'ready' ? previous.index : null;
    if (
      state.kind === 'ready' &&
      (!before || !JSONExt.deepEqual(before, state.index))
    ) {
      this._indexChanged.emit(state.index);
    }
  }

  private _render(): void {
    this._renderCount++;
    const state = this._state;
    this._body.replaceChildren();
    this._body.dataset.state = state.kind;
    switch (state.kind) {
      case 'loading':
        this._body.append(
          element('div', 'nvdashboard-loading', LOADING_TEXT, {
            role: 'status'
          })
        );
        break;
      case 'error':
        this._body.append(
          element(
            'div',
            'nvdashboard-error',
            `Could not load the dashboards: ${state.message}`,
            { role: 'alert' }
          ),
          element('div', 'nvdashboard-retrying', 'Retrying…')
        );
        break;
      case 'ready':
        this._body.append(
          this._renderStatus(state.info, state.infoError),
          this._renderList(state.index)
        );
        break;
    }
  }

  private _renderStatus(
    info: IServerInfo | null,
    infoError: string | null
  ): HTMLElement {
    const status = element('div', 'nvdashboard-status');
    if (!info) {
      status.dataset.kind = 'unknown';
      status.append(
        element(
          'div',
          'nvdashboard-status-headline',
          `GPU status unavailable: ${infoError ?? 'no answer'}`
        )
      );
      return status;
    }
    const summary = describeStatus(info);
    status.dataset.kind = summary.kind;
    status.append(
      element('div', 'nvdashboard-status-headline', summary.headline)
    );
    for (const line of summary.details) {
      const classes = [STATUS_DETAIL_CLASS, LINE_CLASSES[line.kind]];
      if (line.lost) {
        classes.push('nvdashboard-mod-lost');
      }
      status.append(element('div', classes.join(' '), line.text));
    }
    return status;
  }

  private _renderList(index: DashboardIndex): HTMLElement {
    const routes = Object.keys(index);
    if (routes.length === 0) {
      return element(
        'div',
        'nvdashboard-empty',
        'No dashboards are available on this machine.'
      );
    }
    const list = element('ul', 'nvdashboard-list');
    for (const route of routes) {
      const label = index[route];
      const button = element(
        'button',
        `${BUTTON_CLASS} jp-mod-styled`,
        label,
        { 'data-route': route, title: `Open ${label}`, type: 'button' }
      );
      button.addEventListener('click', () => {
        void this._commands.execute(COMMAND_OPEN, { route, label });
      });
      const item = element('li', 'nvdashboard-list-item');
      item.append(button);
      list.append(item);
    }
    return list;
  }

  private _fetcher: IDashboardFetcher;
  private _commands: CommandRegistry;
  private _frequency: IPoll.Frequency;
  private _retryFrequency: IPoll.Frequency;
  private _poll: Poll;
  private _body: HTMLElement;
  private _state: SidebarState = { kind: 'loading' };
  private _renderCount = 0;
  private _indexChanged = new Signal<this, DashboardIndex>(this);
  private _stateChanged = new Signal<this, SidebarState>(this);
}

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string,
  attributes: Record<string, string> = {}
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, value);
  }
  return node;
}
