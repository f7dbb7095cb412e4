/**
 * Validation of the server's JSON documents and their description in plain
 * words. No DOM, no JupyterLab runtime: safe to use anywhere and in tests.
 */
import {
  DashboardIndex,
  IDeviceInfo,
  IServerInfo,
  NvmlState
} from './tokens';

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
 * HTTP statuses seen while jupyter-server-proxy is still bringing the Bokeh
 * server up (or restarting it): gateway errors and tornado's 599.
 */
const STARTING_STATUSES = new Set([502, 503, 504, 599]);

/**
 * Whether an error means "the backend is not up yet" rather than "something
 * is wrong": a network failure or a gateway-type status.
 */
export function isStartingError(error: unknown): boolean {
  if (error instanceof FetchError) {
    return STARTING_STATUSES.has(error.status);
  }
  if (error instanceof Error) {
    // fetch() and ServerConnection.NetworkError both surface as TypeError.
    return error instanceof TypeError || error.name === 'NetworkError';
  }
  return false;
}

/** A one-line message for any thrown value. */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) {
    return error.message || error.name;
  }
  return String(error);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Validate `index.json`: a JSON object whose keys are routes and whose values
 * are string titles. Throws a descriptive error otherwise.
 */
export function parseIndex(data: unknown): DashboardIndex {
  if (!isPlainObject(data)) {
    throw new Error('Dashboard index is not a JSON object');
  }
  const index: DashboardIndex = {};
  for (const [route, title] of Object.entries(data)) {
    if (typeof title !== 'string') {
      throw new Error(
        `Dashboard index entry ${JSON.stringify(route)} is not a string`
      );
    }
    if (!route.replace(/\//g, '')) {
      throw new Error('Dashboard index has an empty route');
    }
    index[route] = title;
  }
  return index;
}

const NVML_STATES: ReadonlySet<string> = new Set<NvmlState>([
  'ok',
  'library_not_found',
  'driver_not_loaded',
  'no_permission',
  'disabled',
  'error'
]);

function numberOr(value: unknown, fallback: number): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : fallback;
}

function stringOr(value: unknown, fallback: string): string {
  return typeof value === 'string' ? value : fallback;
}

/**
 * Validate `info.json`. The object shape and `nvml_state` are required;
 * other fields fall back to neutral values so an older or newer server still
 * produces a readable status.
 */
export function parseInfo(data: unknown): IServerInfo {
  if (!isPlainObject(data)) {
    throw new Error('Server info is not a JSON object');
  }
  const state = data.nvml_state;
  if (typeof state !== 'string' || !NVML_STATES.has(state)) {
    throw new Error(`Unknown NVML state ${JSON.stringify(state)}`);
  }
  const devices: IDeviceInfo[] = Array.isArray(data.devices)
    ? data.devices.filter(isPlainObject).map((device, position) => ({
        ...device,
        index: numberOr(device.index, position),
        name: stringOr(device.name, `GPU ${position}`)
      }))
    : [];
  return {
    version: stringOr(data.version, ''),
    nvml_state: state as NvmlState,
    nvml_message: stringOr(data.nvml_message, ''),
    simulated: data.simulated === true,
    gpu_count: numberOr(data.gpu_count, devices.length),
    devices,
    interval_s: numberOr(data.interval_s, 0),
    history_s: numberOr(data.history_s, 0)
  };
}

/** Plain-words reason for each NVML state other than `ok`. */
const STATE_WORDS: Record<NvmlState, string> = {
  ok: 'GPU monitoring is available',
  library_not_found: 'the NVIDIA management library (NVML) was not found',
  driver_not_loaded: 'the NVIDIA driver is not loaded',
  no_permission: 'no permission to query the GPUs',
  disabled: 'GPU monitoring is disabled',
  error: 'the NVIDIA management library reported an error'
};

/** What the sidebar says about the server's GPUs. */
export interface IStatusSummary {
  kind: 'gpus' | 'simulated' | 'no-gpu';
  /** One short headline, e.g. `Simulated GPUs (4)` or `No GPU`. */
  headline: string;
  /** Further plain sentences, possibly empty. */
  details: string[];
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}

/** Describe `info.json` for people. */
export function describeStatus(info: IServerInfo): IStatusSummary {
  const names = info.devices.map(d => `GPU ${d.index}: ${d.name}`);
  if (info.simulated) {
    return {
      kind: 'simulated',
      headline: `Simulated GPUs (${info.gpu_count})`,
      details: names
    };
  }
  if (info.nvml_state === 'ok' && info.gpu_count > 0) {
    return {
      kind: 'gpus',
      headline: plural(info.gpu_count, 'GPU'),
      details: names
    };
  }
  const reason =
    info.nvml_state === 'ok'
      ? 'no GPU was found on this machine'
      : STATE_WORDS[info.nvml_state];
  const details = [`No GPU: ${reason}.`];
  if (info.nvml_message) {
    details.push(info.nvml_message);
  }
  return { kind: 'no-gpu', headline: 'No GPU', details };
}
