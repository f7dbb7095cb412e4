/**
 * A dashboard tab: a `MainAreaWidget` around an `IFrame` showing one Bokeh
 * document served through jupyter-server-proxy.
 *
 * The iframe boundary. The dashboard page comes from this Jupyter server,
 * through the proxy, so it has JupyterLab's origin: a `sandbox` with
 * `allow-scripts allow-same-origin` would isolate nothing (the page could
 * remove it), so none is set. What keeps the page harmless is that the pages
 * render no untrusted HTML (every value the server shows is text), and that
 * JupyterLab believes only two messages from it, each checked here:
 * - `nvdashboard:open-notebook {path}`: opened through the document manager,
 *   only from this tab's own iframe window (never a null source), only from
 *   this origin, and only for a relative path without `.`/`..` segments;
 * - `nvdashboard:visibility-request`: answered with whether the tab is shown.
 *
 * The tab tells its page when it is shown or hidden (a background tab, a
 * collapsed panel), again each time the page loads, and when the page asks:
 * a hidden page closes its data socket and applies no updates, then catches
 * up when shown. The page cannot see this by itself, since a hidden
 * JupyterLab tab is still a visible browser document.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import { IFrame } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';

import {
  DashboardTheme,
  IOpenArgs,
  ITimeRange,
  OPEN_NOTEBOOK_MESSAGE,
  VISIBILITY_MESSAGE,
  VISIBILITY_REQUEST_MESSAGE,
  WIDGET_CLASS
} from '../shared/tokens';
import { NULL_BUNDLE } from '../shared/format';
import { dashboardUrl, widgetId } from '../shared/urls';

export namespace DashboardWidget {
  export interface IOptions extends IOpenArgs {
    /** The Jupyter server's base URL (from ServerConnection settings). */
    baseUrl: string;
    theme: DashboardTheme;
    /** Open a notebook the page links to (its path on the Jupyter server). */
    openPath?: (path: string) => void;
    trans?: TranslationBundle;
  }
}

export class DashboardWidget extends MainAreaWidget<IFrame> {
  constructor(options: DashboardWidget.IOptions) {
    const content = new IFrame();
    // No sandbox: see the module comment for why it would isolate nothing.
    content.node.querySelector('iframe')?.removeAttribute('sandbox');
    super({ content });
    this.route = options.route;
    this.label = options.label;
    this._baseUrl = options.baseUrl;
    this.id = widgetId(options.route);
    this.addClass(WIDGET_CLASS);
    this.title.label = options.label;
    const trans = options.trans ?? NULL_BUNDLE;
    this.title.caption = trans.__('GPU dashboard: %1', options.label);
    this.title.closable = true;
    this._range = options.range ?? null;
    this.setTheme(options.theme);
    this._openPath = options.openPath;
    window.addEventListener('message', this._onMessage);
    // A page that loads after the tab was hidden missed the message.
    this._frame()?.addEventListener('load', this._onLoad);
  }

  dispose(): void {
    window.removeEventListener('message', this._onMessage);
    this._frame()?.removeEventListener('load', this._onLoad);
    super.dispose();
  }

  private _frame(): HTMLIFrameElement | null {
    return this.content.node.querySelector('iframe');
  }

  private _onLoad = (): void => {
    this._tellPage(this.isVisible);
  };

  /** A message from this tab's own page; anything else is ignored. */
  private _onMessage = (event: MessageEvent): void => {
    const page = this._frame()?.contentWindow ?? null;
    const data = event.data as { type?: unknown; path?: unknown } | null;
    if (
      page === null ||
      event.source === null ||
      event.source !== page ||
      event.origin !== window.location.origin ||
      typeof data !== 'object' ||
      data === null
    ) {
      return;
    }
    if (data.type === VISIBILITY_REQUEST_MESSAGE) {
      this._tellPage(this.isVisible);
    } else if (
      data.type === OPEN_NOTEBOOK_MESSAGE &&
      isNotebookPath(data.path)
    ) {
      this._openPath?.(data.path);
    }
  };

  /** Route as in the index, e.g. `/GPU-Utilization`. */
  readonly route: string;

  /** Tab title. */
  readonly label: string;

  /** Point the iframe at the page for this theme (reloads only on change). */
  setTheme(theme: DashboardTheme): void {
    this._theme = theme;
    const url = dashboardUrl(this._baseUrl, this.route, theme, this._range);
    if (this.content.url !== url) {
      this.content.url = url;
    }
  }

  /** The span the page shows, marked; null while it follows now. */
  get range(): ITimeRange | null {
    return this._range;
  }

  /** Show this span (a cell's), or with null follow now; reloads only on change. */
  setRange(range: ITimeRange | null): void {
    this._range = range;
    this.setTheme(this._theme);
  }

  /** Whether the page is on screen, as last told to it. */
  get pageVisible(): boolean {
    return this._pageVisible;
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._tellPage(this.isVisible);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._tellPage(true);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._tellPage(false);
  }

  protected onBeforeDetach(msg: Message): void {
    this._tellPage(false);
    super.onBeforeDetach(msg);
  }

  private _tellPage(visible: boolean): void {
    this._pageVisible = visible;
    const page = this._frame()?.contentWindow;
    if (!page) {
      return;
    }
    // Same origin as JupyterLab (the page comes through the proxy): never '*'.
    page.postMessage(
      { type: VISIBILITY_MESSAGE, visible },
      window.location.origin
    );
  }

  private _baseUrl: string;
  private _theme: DashboardTheme = 'light';
  private _range: ITimeRange | null = null;
  // A tab attached in the background was never shown: its page is hidden.
  private _pageVisible = false;
  private _openPath: ((path: string) => void) | undefined;
}

/**
 * Whether a path from a page has the shape of a file path on this Jupyter
 * server: relative, no `.` or `..` segment, no empty segment, no backslash,
 * no control character, no URL scheme.
 */
export function isNotebookPath(path: unknown): path is string {
  if (typeof path !== 'string' || !path || path.length > 4096) {
    return false;
  }
  const control = Array.from(path).some(c => c < ' ' || c === '\u007f');
  if (
    control ||
    path.includes('\\') ||
    /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(path)
  ) {
    return false;
  }
  return path
    .split('/')
    .every(segment => segment !== '' && segment !== '.' && segment !== '..');
}
