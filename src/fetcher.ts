/**
 * The real data source of the sidebar: `index.json` and `info.json` fetched
 * through jupyter-server-proxy with the notebook server's connection settings
 * (base URL, token, XSRF header).
 */
import { ServerConnection } from '@jupyterlab/services';

import { FetchError } from './model';
import { IDashboardFetcher } from './tokens';
import { glanceUrl, indexUrl, infoUrl } from './urls';

async function getJson(
  url: string,
  settings: ServerConnection.ISettings
): Promise<unknown> {
  const response = await ServerConnection.makeRequest(
    url,
    { method: 'GET', cache: 'no-store' },
    settings
  );
  if (!response.ok) {
    throw new FetchError(
      response.status,
      `GET ${url} answered ${response.status} ${response.statusText}`.trim()
    );
  }
  return response.json();
}

/** `glance.json` (GPU utilization and memory, the user's GPU kernels). */
export function fetchGlance(
  settings: ServerConnection.ISettings
): Promise<unknown> {
  return getJson(glanceUrl(settings.baseUrl), settings);
}

/** A fetcher bound to one set of server settings. */
export function createServerFetcher(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): IDashboardFetcher {
  return {
    fetchIndex: () => getJson(indexUrl(settings.baseUrl), settings),
    fetchInfo: () => getJson(infoUrl(settings.baseUrl), settings)
  };
}
