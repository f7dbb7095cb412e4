/**
 * The real data source of the sidebar: `index.json` and `info.json` fetched
 * through jupyter-server-proxy with the notebook server's connection settings
 * (base URL, token, XSRF header).
 */
import { ServerConnection } from '@jupyterlab/services';

import { FetchError, NetworkFailure } from './errors';
import { IDashboardFetcher } from './tokens';
import {
  cellReportUrl,
  cullsUrl,
  glanceStreamUrl,
  glanceUrl,
  indexUrl,
  infoUrl,
  keepsUrl,
  noticesUrl
} from './urls';

/** What the socket's owner is told: each message's parsed body, and a close. */
export interface IGlanceStreamHandlers {
  message: (body: unknown) => void;
  /** The server's heartbeat: a tick with nothing new. */
  alive: () => void;
  /** The socket closed (or could not open) by itself. */
  closed: () => void;
}

/** How long the dashboard list waits for an answer before it counts as none. */
export const INDEX_TIMEOUT_MS = 10_000;

/**
 * GET a JSON document. A request that gets no answer within `timeoutMs` is
 * aborted and rejects like a gateway timeout (599): a hung backend behind
 * the proxy then reads as "stale", not as a poll that never returns.
 */
async function getJson(
  url: string,
  settings: ServerConnection.ISettings,
  timeoutMs: number
): Promise<unknown> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    const response = await ServerConnection.makeRequest(
      url,
      { method: 'GET', cache: 'no-store', signal: controller.signal },
      settings
    );
    if (!response.ok) {
      throw new FetchError(
        response.status,
        `GET ${url} answered ${response.status} ${response.statusText}`.trim()
      );
    }
    return await response.json();
  } catch (error) {
    if (controller.signal.aborted) {
      throw new FetchError(
        599,
        `no answer within ${Math.round(timeoutMs / 1000)} s`
      );
    }
    if (error instanceof ServerConnection.NetworkError) {
      throw new NetworkFailure(error.message);
    }
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * `glance.json` (GPU utilization and memory, the user's GPU kernels); no
 * answer within `timeoutMs` (the poll interval) is a failed poll.
 */
export function fetchGlance(
  settings: ServerConnection.ISettings,
  timeoutMs = 2000
): Promise<unknown> {
  return getJson(glanceUrl(settings.baseUrl), settings, timeoutMs);
}

/**
 * The glance socket through jupyter-server-proxy (`glance/stream`): each
 * message's parsed body to `handlers.message`; `handlers.closed` once when
 * it closes or cannot open, unless `close()` closed it. Jupyter's login
 * goes as it does for JupyterLab's own sockets: its cookie, and the token
 * where the settings append it.
 */
export function openGlanceStream(
  settings: ServerConnection.ISettings,
  intervalMs: number,
  handlers: IGlanceStreamHandlers
): { close: () => void } {
  let url = glanceStreamUrl(settings.wsUrl, intervalMs);
  if (settings.appendToken && settings.token) {
    url += `&token=${encodeURIComponent(settings.token)}`;
  }
  let open = true;
  const socket = new settings.WebSocket(url);
  socket.onmessage = (event: MessageEvent) => {
    if (event.data === '') {
      handlers.alive(); // a tick with nothing new
      return;
    }
    let body: unknown;
    try {
      body = JSON.parse(String(event.data));
    } catch {
      return; // not a glance: the next one is
    }
    handlers.message(body);
  };
  socket.onclose = () => {
    if (open) {
      open = false;
      handlers.closed();
    }
  };
  return {
    close: () => {
      open = false;
      socket.close();
    }
  };
}

/**
 * `cell.json`: what the kernel did on the GPU over a cell's span (the
 * kernel's own times, as its messages carry them).
 */
export function fetchCellReport(
  settings: ServerConnection.ISettings,
  kernelId: string,
  start: string,
  end: string
): Promise<unknown> {
  return getJson(
    cellReportUrl(settings.baseUrl, kernelId, start, end),
    settings,
    INDEX_TIMEOUT_MS
  );
}

/** The admin's GPU idle cull and the kernels it shut down (Jupyter's own route). */
export function fetchCulls(
  settings: ServerConnection.ISettings
): Promise<unknown> {
  return getJson(cullsUrl(settings.baseUrl), settings, INDEX_TIMEOUT_MS);
}

/** POST `body` to one of Jupyter's idle routes; its JSON answer. */
async function postIdle(
  settings: ServerConnection.ISettings,
  url: string,
  body: Record<string, string>
): Promise<Record<string, unknown>> {
  const response = await ServerConnection.makeRequest(
    url,
    { method: 'POST', body: JSON.stringify(body) },
    settings
  );
  if (!response.ok) {
    throw new FetchError(
      response.status,
      `POST ${url} answered ${response.status} ${response.statusText}`.trim()
    );
  }
  const answer: unknown = await response.json().catch(() => null);
  return answer && typeof answer === 'object'
    ? (answer as Record<string, unknown>)
    : {};
}

/**
 * Tell the Jupyter server that the idle notice for this kernel's idle
 * episode is on screen (the cull never acts before it was for a whole
 * grace); resolves with when the cull may act (epoch s), null when it will
 * not.
 */
export async function postNotice(
  settings: ServerConnection.ISettings,
  kernelId: string,
  episode: string
): Promise<number | null> {
  const answer = await postIdle(settings, noticesUrl(settings.baseUrl), {
    kernel_id: kernelId,
    episode
  });
  return typeof answer.cull_at === 'number' ? answer.cull_at : null;
}

/**
 * "Keep this kernel": the cull holds off; resolves with until when (epoch
 * s), null when the cull is off.
 */
export async function postKeep(
  settings: ServerConnection.ISettings,
  kernelId: string
): Promise<number | null> {
  const answer = await postIdle(settings, keepsUrl(settings.baseUrl), {
    kernel_id: kernelId
  });
  return typeof answer.kept_until === 'number' ? answer.kept_until : null;
}

/** A fetcher bound to one set of server settings. */
export function createServerFetcher(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): IDashboardFetcher {
  return {
    fetchIndex: () =>
      getJson(indexUrl(settings.baseUrl), settings, INDEX_TIMEOUT_MS),
    fetchInfo: () =>
      getJson(infoUrl(settings.baseUrl), settings, INDEX_TIMEOUT_MS)
  };
}
