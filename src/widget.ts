/**
 * A dashboard tab: a `MainAreaWidget` around a sandboxed `IFrame` showing
 * one Bokeh document served through jupyter-server-proxy.
 *
 * The tab tells its page when it is shown or hidden (a background tab, a
 * collapsed panel): a hidden page closes its data socket and applies no
 * updates, then catches up when shown. The page cannot see this by itself,
 * since a hidden JupyterLab tab is still a visible browser document.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { IFrame } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';

import {
  DashboardTheme,
  IOpenArgs,
  OPEN_NOTEBOOK_MESSAGE,
  VISIBILITY_MESSAGE,
  WIDGET_CLASS
} from './tokens';
import { dashboardUrl, widgetId } from './urls';

export namespace DashboardWidget {
  export interface IOptions extends IOpenArgs {
    /** The Jupyter server's base URL (from ServerConnection settings). */
    baseUrl: string;
    theme: DashboardTheme;
    /** Open a notebook the page links to (its path on the Jupyter server). */
    openPath?: (path: string) => void;
  }
}

export class DashboardWidget extends MainAreaWidget<IFrame> {
  constructor(options: DashboardWidget.IOptions) {
    const content = new IFrame({
      // Bokeh needs scripts and a same-origin websocket back to the proxy.
      sandbox: ['allow-scripts', 'allow-same-origin']
    });
    super({ content });
    this.route = options.route;
    this.label = options.label;
    this._baseUrl = options.baseUrl;
    this.id = widgetId(options.route);
    this.addClass(WIDGET_CLASS);
    this.title.label = options.label;
    this.title.caption = `GPU dashboard: ${options.label}`;
    this.title.closable = true;
    this.setTheme(options.theme);
    this._openPath = options.openPath;
    window.addEventListener('message', this._onMessage);
  }

  dispose(): void {
    window.removeEventListener('message', this._onMessage);
    super.dispose();
  }

  /** A notebook link clicked in this tab's own page (same origin only). */
  private _onMessage = (event: MessageEvent): void => {
    const frame = this.content.node.querySelector('iframe');
    const data = event.data as { type?: unknown; path?: unknown } | null;
    if (
      !frame ||
      event.source !== frame.contentWindow ||
      event.origin !== window.location.origin ||
      !data ||
      data.type !== OPEN_NOTEBOOK_MESSAGE ||
      typeof data.path !== 'string' ||
      !data.path
    ) {
      return;
    }
    this._openPath?.(data.path);
  };

  /** Route as in the index, e.g. `/GPU-Utilization`. */
  readonly route: string;

  /** Tab title. */
  readonly label: string;

  /** Point the iframe at the page for this theme (reloads only on change). */
  setTheme(theme: DashboardTheme): void {
    const url = dashboardUrl(this._baseUrl, this.route, theme);
    if (this.content.url !== url) {
      this.content.url = url;
    }
  }

  /** Whether the page is on screen, as last told to it. */
  get pageVisible(): boolean {
    return this._pageVisible;
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
    const frame = this.content.node.querySelector('iframe');
    const page = frame?.contentWindow;
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
  private _pageVisible = true;
  private _openPath: ((path: string) => void) | undefined;
}
