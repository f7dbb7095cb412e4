/**
 * A dashboard tab: a `MainAreaWidget` around a sandboxed `IFrame` showing
 * one Bokeh document served through jupyter-server-proxy.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { IFrame } from '@jupyterlab/ui-components';

import { DashboardTheme, IOpenArgs, WIDGET_CLASS } from './tokens';
import { dashboardUrl, widgetId } from './urls';

export namespace DashboardWidget {
  export interface IOptions extends IOpenArgs {
    /** The Jupyter server's base URL (from ServerConnection settings). */
    baseUrl: string;
    theme: DashboardTheme;
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
  }

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

  private _baseUrl: string;
}
