/**
 * Constants and types shared by the nvdashboard frontend.
 *
 * This module must stay free of side effects and of runtime imports, so any
 * other module (and every test) can import it cheaply.
 */

/** The one command that opens (or re-activates) a dashboard tab. */
export const COMMAND_OPEN = 'nvdashboard:open';

/** The name the Bokeh server is registered under in jupyter-server-proxy. */
export const PROXY_NAME = 'nvdashboard';

/** Namespace of the widget tracker used for layout restoration. */
export const TRACKER_NAMESPACE = 'nvdashboard';

/** Command palette category for the per-dashboard entries. */
export const PALETTE_CATEGORY = 'GPU Dashboards';

/** Title of the left-area sidebar panel. */
export const SIDEBAR_TITLE = 'GPU Dashboards';

/** DOM id of the sidebar panel (also its layout-restorer key). */
export const SIDEBAR_ID = 'nvdashboard-sidebar';

/** Prefix of the stable per-route main-area widget ids. */
export const WIDGET_ID_PREFIX = 'nvdashboard-';

/** CSS class on every dashboard main-area widget. */
export const WIDGET_CLASS = 'nvdashboard-widget';

/** CSS class on every dashboard button in the sidebar. */
export const BUTTON_CLASS = 'nvdashboard-button';

/** Text shown while the proxied Bokeh server is starting. */
export const LOADING_TEXT = 'Starting the dashboard server…';

/**
 * The dashboard index served at `{base}nvdashboard/index.json`:
 * route (e.g. `/GPU-Utilization`) → human title (e.g. `GPU Utilization`).
 */
export type DashboardIndex = Record<string, string>;

/** The colour scheme a dashboard page is asked to render with. */
export type DashboardTheme = 'dark' | 'light';

/** Why NVML is (or is not) usable, as reported by the server. */
export type NvmlState =
  | 'ok'
  | 'library_not_found'
  | 'driver_not_loaded'
  | 'no_permission'
  | 'disabled'
  | 'error';

/** One GPU as listed in `info.json`; fields beyond index and name vary. */
export interface IDeviceInfo {
  index: number;
  name: string;
  [key: string]: unknown;
}

/** The server status served at `{base}nvdashboard/info.json`. */
export interface IServerInfo {
  version: string;
  nvml_state: NvmlState;
  nvml_message: string;
  simulated: boolean;
  gpu_count: number;
  devices: IDeviceInfo[];
  interval_s: number;
  history_s: number;
}

/** Arguments of the `nvdashboard:open` command. */
export interface IOpenArgs {
  /** Route as in the index, e.g. `/GPU-Utilization` (leading slash optional). */
  route: string;
  /** Tab title, e.g. `GPU Utilization`. */
  label: string;
}

/** Where the sidebar gets its data; injectable so tests can fake the server. */
export interface IDashboardFetcher {
  /** Resolve with the parsed JSON body of `index.json`, or reject. */
  fetchIndex(): Promise<unknown>;
  /** Resolve with the parsed JSON body of `info.json`, or reject. */
  fetchInfo(): Promise<unknown>;
}
