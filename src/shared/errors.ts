/**
 * What a failed request was: an HTTP status, no answer at all, or a server
 * still on its way up. The fetcher throws these; the polls and the views
 * judge them here, in one place.
 */
/** A non-2xx answer from the server, keeping its HTTP status. */
export class FetchError extends Error {
  constructor(
    readonly status: number,
    message: string
  ) {
    super(message);
    this.name = 'FetchError';
  }
}

/**
 * A request that got no answer at all (the network or the proxy dropped it).
 * The fetcher turns JupyterLab's `ServerConnection.NetworkError` into this:
 * that one is a `TypeError` by name, with the browser's own wording
 * ("The network connection was lost."), so neither its name nor its message
 * can tell it from a bug.
 */
export class NetworkFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NetworkFailure';
  }
}

/**
 * HTTP statuses seen while jupyter-server-proxy is still bringing the Bokeh
 * server up (or restarting it): gateway errors and tornado's 599.
 */
const STARTING_STATUSES = new Set([502, 503, 504, 599]);

/** How Chromium, Firefox, Safari and Node word a fetch() that got no answer. */
const FETCH_FAILURE =
  /failed to fetch|networkerror|load failed|fetch failed|network request failed/i;

/**
 * Whether an error means "the backend is not up yet" rather than "something
 * is wrong": a network failure or a gateway-type status.
 */
export function isStartingError(error: unknown): boolean {
  if (error instanceof FetchError) {
    return STARTING_STATUSES.has(error.status);
  }
  if (error instanceof NetworkFailure) {
    return true;
  }
  // A bare fetch() (no ServerConnection) rejects with a TypeError that says
  // so. Any other TypeError is a bug, not a server on its way up.
  return error instanceof TypeError && FETCH_FAILURE.test(error.message);
}

/** A one-line message for any thrown value. */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) {
    return error.message || error.name;
  }
  return String(error);
}
