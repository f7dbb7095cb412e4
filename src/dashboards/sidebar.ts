/**
 * The "GPU Dashboards" sidebar: a panel of widgets. Its own section lists one
 * button per dashboard the server offers, with the server's GPU status in
 * plain words; the plugin puts the live GPU section (`GlancePanel`, with
 * "Your GPU kernels") above it.
 *
 * It polls `index.json` and `info.json` through an injected fetcher (the
 * one `Poller`). While the proxied Bokeh server is starting it shows a
 * loading line and retries with backoff up to `retryMax`; once the list is
 * shown, a failed poll keeps the list and says it is stale, and the server
 * is found again within `retryMax` of its return. While the server says it
 * is still reading its GPUs (its index then lists only the machine
 * dashboards), it polls as often as a retry would. An error that will not
 * heal (a 404: no dashboard server behind the proxy; a bad index) makes it
 * wait longer each time, up to minutes. Nothing is drawn while the sidebar
 * is hidden, and the buttons are kept (with their focus) unless the list
 * itself changes. It polls only while shown: collapsed, it asks nothing
 * (it reads the list once at start for the palette).
 *
 * Over 400 lines: the sidebar and its list section share one poll, one
 * stale/loading state and one retry story; the words they show are in
 * serverInfo.ts already.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import { JSONExt, JSONObject } from '@lumino/coreutils';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { Panel, Widget } from '@lumino/widgets';

import { element, placeInOrder, RenderOnShow, setText } from '../shared/dom';
import {
  describeStatus,
  IStatusLine,
  parseIndex,
  parseInfo
} from './serverInfo';
import { errorMessage, isStartingError } from '../shared/errors';
import { formatAge, NULL_BUNDLE } from '../shared/format';
import { PollOutcome, Poller } from '../shared/poller';
import {
  BUTTON_CLASS,
  COMMAND_OPEN,
  DashboardIndex,
  IDashboardFetcher,
  ILiveReadings,
  IServerInfo,
  SIDEBAR_FOOTER_CLASS,
  SIDEBAR_ID,
  STATUS_DETAIL_CLASS,
  STATUS_MIG_CLASS
} from '../shared/tokens';

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
      /** Whether `info.json` failed as a busy or starting server does (no answer, 5xx gateway). */
      infoSlow: boolean;
      /** Set while the last poll failed: why, and when the list was read. */
      stale: { message: string; readAt: number; failedAt: number } | null;
    };

/** How often the list is asked for while it is shown (ms). */
export const DEFAULT_INTERVAL = 15 * 1000;

/** First retry delay while the server is starting or failing (then backoff). */
export const DEFAULT_RETRY_INTERVAL = 1000;

/** The longest wait between retries: a server that returns is found within it. */
export const DEFAULT_RETRY_MAX = 5000;

export namespace DashboardSidebar {
  export interface IOptions {
    /** Where `index.json` and `info.json` come from. */
    fetcher: IDashboardFetcher;
    /** The registry that holds `nvdashboard:open`. */
    commands: CommandRegistry;
    /** Milliseconds between polls once the list is loaded. */
    interval?: number;
    /** Poll interval while loading or failing (grows with backoff). */
    retryInterval?: number;
    /** The longest wait between retries (default 5 s). */
    retryMax?: number;
    /** The longest wait after errors that will not heal (a 404). */
    stuckMax?: number;
    trans?: TranslationBundle;
    /** The clock (tests). */
    now?: () => number;
    /** When the poll pauses; defaults to while the page is hidden. */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
    /** Poll while shown, and read once at start (default true). */
    autoStart?: boolean;
    /**
     * What else on the sidebar is live (the glance): while it is, a slow or
     * failed `info.json` is not reported as the GPUs' status.
     */
    liveReadings?: ILiveReadings;
  }
}

export class DashboardSidebar extends Panel {
  constructor(options: DashboardSidebar.IOptions) {
    super();
    this.id = SIDEBAR_ID;
    this._trans = options.trans ?? NULL_BUNDLE;
    this.title.caption = this._trans.__('GPU Dashboards');
    this.addClass('nvdashboard-sidebar');
    this.node.tabIndex = -1; // focusable when activated, not a tab stop
    this._now = options.now ?? Date.now;

    this._fetcher = options.fetcher;

    const header = new Widget({
      node: element(
        'h2',
        'nvdashboard-sidebar-header',
        this._trans.__('GPU Dashboards')
      )
    });
    header.addClass('nvdashboard-sidebar-title');
    this.addWidget(header);
    this._section = new IndexSection({
      commands: options.commands,
      trans: this._trans,
      now: this._now,
      state: () => this._state,
      live: () => options.liveReadings?.live ?? false
    });
    options.liveReadings?.changed.connect(this._onLiveChanged, this);
    this.addWidget(this._section);

    // After a 15 s success a failure is retried at the retry interval, not
    // 15 s later; the retry maximum bounds how long a returning server waits.
    this._poller = new Poller({
      name: 'nvdashboard:index',
      request: () => this._tick(),
      interval: options.interval ?? DEFAULT_INTERVAL,
      retryInterval: options.retryInterval ?? DEFAULT_RETRY_INTERVAL,
      retryMax: options.retryMax ?? DEFAULT_RETRY_MAX,
      stuckMax: options.stuckMax,
      standby: options.standby,
      autoStart: options.autoStart
    });
    this._autoStart = options.autoStart ?? true;
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

  /** How many times the dashboard list section was drawn (tests and debugging). */
  get renderCount(): number {
    return this._section.renderCount;
  }

  /** The underlying poll (tests). */
  get poll(): Poll {
    return this._poller.poll;
  }

  /** Milliseconds between polls once the list is shown; applies at once. */
  set interval(value: number) {
    this._poller.interval = value;
  }

  /**
   * Fetch now and update the view; resolves with how it went (never
   * rejects). One request is in flight at a time, and what it resolves with
   * was asked for after the call.
   */
  refresh(): Promise<PollOutcome> {
    return this._poller.refresh();
  }

  // The list is polled only while the sidebar is shown: through the proxy
  // each request may launch a dashboard server that had exited when idle.
  // A sidebar that starts collapsed reads the list once, for the palette.
  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._poller.use(this, this.isVisible);
    if (!this.isVisible && this._autoStart && this._state.kind === 'loading') {
      void this.refresh();
    }
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._poller.use(this, true);
  }

  protected onBeforeHide(msg: Message): void {
    this._poller.use(this, false);
    super.onBeforeHide(msg);
  }

  protected onBeforeDetach(msg: Message): void {
    this._poller.use(this, false);
    super.onBeforeDetach(msg);
  }

  /** Activated (from the status bar, say): the keyboard lands in the panel. */
  protected onActivateRequest(msg: Message): void {
    super.onActivateRequest(msg);
    if (!this.isAttached || this.node.contains(document.activeElement)) {
      return;
    }
    const first = Array.from(
      this.node.querySelectorAll<HTMLButtonElement>('button')
    ).find(button => !button.disabled && !button.closest('[hidden]'));
    (first ?? this.node).focus();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poller.dispose();
    Signal.clearData(this); // its own signals, and its connection to the live readings
    super.dispose();
  }

  private _onLiveChanged(): void {
    if (this._state.kind === 'ready' && this._state.infoError !== null) {
      this._section.invalidate();
    }
  }

  /** One poll: how it went sets the wait before the next. */
  private async _tick(): Promise<PollOutcome> {
    let index: DashboardIndex;
    try {
      index = parseIndex(await this._fetcher.fetchIndex());
    } catch (error) {
      const starting = isStartingError(error);
      const previous = this._state;
      if (previous.kind === 'ready' && starting) {
        // Keep what was shown, and say it is stale.
        const readAt = previous.stale ? previous.stale.readAt : this._readAt;
        this._setState({
          ...previous,
          stale: { message: errorMessage(error), readAt, failedAt: this._now() }
        });
      } else {
        this._setState(
          starting
            ? { kind: 'loading' }
            : { kind: 'error', message: errorMessage(error) }
        );
      }
      return starting ? 'retry' : 'stuck';
    }
    let info: IServerInfo | null = null;
    let infoError: string | null = null;
    let infoSlow = false;
    try {
      info = parseInfo(await this._fetcher.fetchInfo());
    } catch (error) {
      infoError = errorMessage(error);
      infoSlow = isStartingError(error);
      // What the server said of its GPUs before stands: it rarely changes.
      info = this._state.kind === 'ready' ? this._state.info : null;
    }
    this._readAt = this._now();
    this._setState({
      kind: 'ready',
      index,
      info,
      infoError,
      infoSlow,
      stale: null
    });
    // While the server is still reading its GPUs, the GPU dashboards are about
    // to join the list: ask again as soon as a retry would, not in 15 s.
    return this._readingGpus() ? 'retry' : 'ok';
  }

  private _readingGpus(): boolean {
    const state = this._state;
    return state.kind === 'ready' && state.info?.reading_gpus === true;
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
    this._section.invalidate();
    this._stateChanged.emit(state);
    const before = previous.kind === 'ready' ? previous.index : null;
    if (
      state.kind === 'ready' &&
      (!before || !JSONExt.deepEqual(before, state.index))
    ) {
      this._indexChanged.emit(state.index);
    }
  }

  private _fetcher: IDashboardFetcher;
  private _trans: TranslationBundle;
  private _now: () => number;
  private _poller: Poller;
  private _autoStart: boolean;
  private _section: IndexSection;
  private _state: SidebarState = { kind: 'loading' };
  private _readAt = 0;
  private _indexChanged = new Signal<this, DashboardIndex>(this);
  private _stateChanged = new Signal<this, SidebarState>(this);
}

namespace IndexSection {
  export interface IOptions {
    commands: CommandRegistry;
    trans: TranslationBundle;
    now: () => number;
    state: () => SidebarState;
    /** Whether something else on the sidebar is live (the meters). */
    live: () => boolean;
  }
}

/** The dashboard list with the GPU status: drawn only while visible. */
class IndexSection extends RenderOnShow {
  constructor(options: IndexSection.IOptions) {
    super();
    this._options = options;
    this.addClass('nvdashboard-sidebar-body');
    const trans = options.trans;
    this._heading = element(
      'h3',
      'nvdashboard-sidebar-header',
      trans.__('Dashboards')
    );
    // Speaks when the list goes stale; the age beside it changes at every
    // failed poll and stays out of the live region.
    this._stale = element('div', 'nvdashboard-stale');
    this._staleSays = element('span', 'nvdashboard-stale-state', undefined, {
      role: 'status'
    });
    this._staleDetail = element('span', 'nvdashboard-stale-detail');
    this._stale.append(this._staleSays, ' ', this._staleDetail);
    this._content = element('div', 'nvdashboard-sidebar-content');
    this._list = element('ul', 'nvdashboard-list');
    // Which package the server runs (its `info.json` version): another project
    // once published under the same name, so a user can tell which they have.
    this._footer = element('div', SIDEBAR_FOOTER_CLASS);
    this._footer.hidden = true;
    this.node.append(this._heading, this._stale, this._content, this._footer);
  }

  protected render(): void {
    const state = this._options.state();
    const trans = this._options.trans;
    this.node.dataset.state = state.kind;
    const stale = state.kind === 'ready' ? state.stale : null;
    this._stale.hidden = stale === null;
    setText(
      this._staleSays,
      stale
        ? trans.__('Stale: the dashboard server did not answer. Retrying…')
        : ''
    );
    setText(
      this._staleDetail,
      stale
        ? trans.__(
            'This list was read %1 ago (%2).',
            formatAge(stale.failedAt - stale.readAt, trans),
            stale.message
          )
        : ''
    );
    switch (state.kind) {
      case 'loading':
        this._listKey = '';
        this._content.replaceChildren(
          element(
            'div',
            'nvdashboard-loading',
            trans.__('Starting the dashboard server…'),
            { role: 'status' }
          )
        );
        break;
      case 'error':
        this._listKey = '';
        this._content.replaceChildren(
          element(
            'div',
            'nvdashboard-error',
            trans.__('Could not load the dashboards: %1', state.message),
            { role: 'alert' }
          ),
          element('div', 'nvdashboard-retrying', trans.__('Retrying…'))
        );
        break;
      case 'ready': {
        // The last version read stays while a later info.json fails.
        const version = state.info?.version;
        if (version) {
          setText(this._footer, trans.__('NVDashboard %1', version));
          this._footer.hidden = false;
        }
        const status = this._renderStatus(state);
        const list = this._renderList(state.index);
        placeInOrder(this._content, status ? [status, list] : [list]);
        break;
      }
    }
  }

  /**
   * The server's GPU status; with none read yet, why, but only while nothing
   * else on the sidebar is live: under load `info.json` can time out while
   * the meters above keep updating, and "unavailable" beside them is false.
   */
  private _renderStatus(
    state: Extract<SidebarState, { kind: 'ready' }>
  ): HTMLElement | null {
    const { info, infoError } = state;
    const trans = this._options.trans;
    const live = !info && this._options.live();
    const key = JSON.stringify([
      info,
      live ? null : [infoError, state.infoSlow]
    ]);
    if (key === this._statusKey) {
      return this._status;
    }
    this._statusKey = key;
    if (live) {
      this._status = null;
      return null;
    }
    const status = element('div', 'nvdashboard-status');
    this._status = status;
    if (!info) {
      status.dataset.kind = 'unknown';
      status.append(
        element(
          'div',
          'nvdashboard-status-headline',
          state.infoSlow
            ? trans.__(
                'GPU status: the dashboard server is slow to answer (%1)',
                infoError
              )
            : trans.__(
                'GPU status unavailable: %1',
                infoError ?? trans.__('no answer')
              )
        )
      );
      return status;
    }
    const summary = describeStatus(info, trans);
    status.dataset.kind = summary.kind;
    if (summary.details.length === 0) {
      status.append(
        element('div', 'nvdashboard-status-headline', summary.headline)
      );
      return status;
    }
    // The headline, with its lines a click away, so that the dashboard list
    // stays above the fold; open when something is wrong (no GPU, a lost
    // one), and as the user left it.
    const wasOpen = this._statusOpen;
    const details = element('details', 'nvdashboard-status-details');
    details.append(
      element('summary', 'nvdashboard-status-headline', summary.headline)
    );
    for (const line of summary.details) {
      const classes = [STATUS_DETAIL_CLASS, LINE_CLASSES[line.kind]];
      if (line.lost) {
        classes.push('nvdashboard-mod-lost');
      }
      details.append(element('div', classes.join(' '), line.text));
    }
    const troubled =
      summary.kind === 'no-gpu' ||
      summary.kind === 'unknown' ||
      summary.details.some(line => line.lost);
    details.open = wasOpen ?? troubled;
    details.addEventListener('toggle', () => {
      this._statusOpen = details.open;
    });
    status.append(details);
    return status;
  }

  private _renderList(index: DashboardIndex): HTMLElement {
    const key = JSON.stringify(index);
    if (key === this._listKey && this._listNode) {
      return this._listNode;
    }
    this._listKey = key;
    const trans = this._options.trans;
    const routes = Object.keys(index);
    if (routes.length === 0) {
      this._listNode = element(
        'div',
        'nvdashboard-empty',
        trans.__('No dashboards are available on this machine.')
      );
      return this._listNode;
    }
    // Buttons are kept by route, so one that has focus keeps it.
    const kept = new Map<string, HTMLElement>();
    for (const item of Array.from(this._list.children) as HTMLElement[]) {
      kept.set(item.dataset.key ?? '', item);
    }
    const items = routes.map(route => {
      const label = index[route];
      const itemKey = JSON.stringify([route, label]);
      const old = kept.get(itemKey);
      if (old) {
        return old;
      }
      const button = element('button', `${BUTTON_CLASS} jp-mod-styled`, label, {
        'data-route': route,
        title: trans.__('Open %1', label),
        type: 'button'
      });
      button.addEventListener('click', () => {
        void this._options.commands.execute(COMMAND_OPEN, { route, label });
      });
      const item = element('li', 'nvdashboard-list-item');
      item.dataset.key = itemKey;
      item.append(button);
      return item;
    });
    placeInOrder(this._list, items);
    this._listNode = this._list;
    return this._list;
  }

  private _options: IndexSection.IOptions;
  private _heading: HTMLElement;
  private _stale: HTMLElement;
  private _staleSays: HTMLElement;
  private _staleDetail: HTMLElement;
  private _content: HTMLElement;
  private _footer: HTMLElement;
  private _list: HTMLElement;
  private _listNode: HTMLElement | null = null;
  private _listKey = '';
  private _status: HTMLElement | null = null;
  private _statusKey = '';
  /** Whether the user opened (true) or closed (false) the status lines. */
  private _statusOpen: boolean | null = null;
}
