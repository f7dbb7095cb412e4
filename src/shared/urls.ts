/**
 * Pure URL helpers: every URL the frontend requests or embeds is built here
 * from the Jupyter server's base URL, so the extension works under any
 * prefix (`/`, `/user/alice/`, `http://host:8888/lab-prefix/`).
 */
import { URLExt } from '@jupyterlab/coreutils';

import {
  DashboardTheme,
  IDLE_API,
  ITimeRange,
  PROXY_NAME,
  WIDGET_ID_PREFIX
} from './tokens';

/**
 * The route without leading/trailing slashes, e.g. `GPU-Utilization`.
 *
 * Throws on an empty route or one that tries to climb out of the proxy
 * prefix, since such a value can only come from a broken index.
 */
export function routePath(route: string): string {
  const path = route.replace(/^\/+/, '').replace(/\/+$/, '');
  const segments = path.split('/');
  if (!path || segments.some(s => s === '' || s === '.' || s === '..')) {
    throw new Error(`Invalid dashboard route: ${JSON.stringify(route)}`);
  }
  return segments.map(encodeURIComponent).join('/');
}

/** `{baseUrl}nvdashboard/index.json` */
export function indexUrl(baseUrl: string): string {
  return URLExt.join(baseUrl, PROXY_NAME, 'index.json');
}

/** `{baseUrl}nvdashboard/info.json` */
export function infoUrl(baseUrl: string): string {
  return URLExt.join(baseUrl, PROXY_NAME, 'info.json');
}

/** `{baseUrl}nvdashboard/glance.json` */
export function glanceUrl(baseUrl: string): string {
  return URLExt.join(baseUrl, PROXY_NAME, 'glance.json');
}

/**
 * `{wsUrl}nvdashboard/glance/stream?interval=SECONDS`: the glance, sent when
 * it changes, at most every `intervalMs`.
 */
export function glanceStreamUrl(wsUrl: string, intervalMs: number): string {
  const url = URLExt.join(wsUrl, PROXY_NAME, 'glance', 'stream');
  return `${url}${URLExt.objectToQueryString({ interval: String(intervalMs / 1000) })}`;
}

/**
 * `{baseUrl}nvdashboard/cell.json?kernel=…&start=…&end=…`: what a kernel did
 * on the GPU over a cell's span; the times are passed as the kernel stamped
 * them (ISO 8601 with their zone), never re-read by the browser's clock.
 */
export function cellReportUrl(
  baseUrl: string,
  kernelId: string,
  start: string,
  end: string
): string {
  const url = URLExt.join(baseUrl, PROXY_NAME, 'cell.json');
  return `${url}${URLExt.objectToQueryString({ kernel: kernelId, start, end })}`;
}

/** `{baseUrl}nvdashboard-idle/notices`: JupyterLab showed an idle notice. */
export function noticesUrl(baseUrl: string): string {
  return URLExt.join(baseUrl, IDLE_API, 'notices');
}

/** `{baseUrl}nvdashboard-idle/keeps`: the user chose "Keep this kernel". */
export function keepsUrl(baseUrl: string): string {
  return URLExt.join(baseUrl, IDLE_API, 'keeps');
}

/** `{baseUrl}nvdashboard-idle/culls`: the admin's cull and what it did. */
export function cullsUrl(baseUrl: string): string {
  return URLExt.join(baseUrl, IDLE_API, 'culls');
}

/**
 * `{baseUrl}nvdashboard/<Route>?theme=dark|light`, and with a time range
 * `&start=<s>&end=<s>&label=<words>`: a timeline page then shows that span,
 * marked; and `&gpus=<uuid>,<uuid>` where it names GPUs: /GPU-Activity then
 * shows those alone.
 */
export function dashboardUrl(
  baseUrl: string,
  route: string,
  theme: DashboardTheme,
  range: ITimeRange | null = null
): string {
  const url = URLExt.join(baseUrl, PROXY_NAME, routePath(route));
  const query: Record<string, string> = { theme };
  if (range) {
    query.start = String(range.start_s);
    query.end = String(range.end_s);
    if (range.label) {
      query.label = range.label;
    }
    if (range.gpus && range.gpus.length) {
      query.gpus = range.gpus.join(',');
    }
  }
  return `${url}${URLExt.objectToQueryString(query)}`;
}

/**
 * Stable main-area widget id for a route, e.g. `nvdashboard-GPU-Utilization`.
 * Letters, digits and `-` stand for themselves; any other character becomes
 * `_<hex code point>_`, so two routes never share an id (`/a/b` and `/a-b`).
 */
export function widgetId(route: string): string {
  const path = route.replace(/^\/+/, '').replace(/\/+$/, '');
  return (
    WIDGET_ID_PREFIX +
    path.replace(
      /[^A-Za-z0-9-]/gu,
      c => `_${(c.codePointAt(0) as number).toString(16)}_`
    )
  );
}

/** The subset of `IThemeManager` the theme choice depends on. */
export interface IThemeSource {
  readonly theme: string | null;
  isLight(name: string): boolean;
}

/**
 * `dark` when the current JupyterLab theme is a dark one, otherwise `light`
 * (also while no theme is loaded yet, or without a theme manager).
 */
export function dashboardTheme(
  themes: IThemeSource | null | undefined
): DashboardTheme {
  const name = themes?.theme;
  if (!themes || !name) {
    return 'light';
  }
  return themes.isLight(name) === false ? 'dark' : 'light';
}
