/**
 * Validation of the server's JSON documents and their description in plain
 * words. No DOM, no JupyterLab runtime: safe to use anywhere and in tests.
 */
import {
  DashboardIndex,
  IDeviceInfo,
  IMigInfo,
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

/** Plain-words reason for each NVML state; also the list of known states. */
const STATE_WORDS: Record<NvmlState, string> = {
  uninitialized: 'GPU monitoring is still starting',
  ok: 'GPU monitoring is available',
  library_not_found: 'the NVIDIA management library (NVML) was not found',
  driver_not_loaded: 'the NVIDIA driver is not loaded',
  no_permission: 'no permission to query the GPUs',
  no_devices: 'no GPU is visible to this process',
  error: 'the NVIDIA management library reported an error'
};

function isNvmlState(value: string): value is NvmlState {
  return Object.prototype.hasOwnProperty.call(STATE_WORDS, value);
}

function numberOr(value: unknown, fallback: number): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : fallback;
}

function numberOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function stringOr(value: unknown, fallback: string): string {
  return typeof value === 'string' ? value : fallback;
}

function parseMig(value: unknown): IMigInfo | null {
  if (!isPlainObject(value)) {
    return null;
  }
  return {
    gpu_instance_id: numberOrNull(value.gpu_instance_id),
    compute_instance_id: numberOrNull(value.compute_instance_id),
    gpu_slices: numberOrNull(value.gpu_slices),
    compute_slices: numberOrNull(value.compute_slices),
    memory_slices: numberOrNull(value.memory_slices),
    multiprocessors: numberOrNull(value.multiprocessors)
  };
}

function parseReasons(value: unknown): Record<string, string> {
  const reasons: Record<string, string> = {};
  if (isPlainObject(value)) {
    for (const [metric, reason] of Object.entries(value)) {
      if (typeof reason === 'string') {
        reasons[metric] = reason;
      }
    }
  }
  return reasons;
}

/** One `devices[]` entry; an older server sends only index and name. */
function parseDevice(
  device: Record<string, unknown>,
  position: number
): IDeviceInfo {
  const index = numberOr(device.index, position);
  const label = stringOr(device.label, `GPU ${index}`);
  const cudaIndex = numberOrNull(device.cuda_index);
  return {
    ...device,
    index,
    label,
    kind: device.kind === 'mig' ? 'mig' : 'gpu',
    parent: numberOrNull(device.parent),
    nvml_index: numberOrNull(device.nvml_index),
    cuda_index: cudaIndex,
    cuda_index_known: cudaIndex !== null || device.cuda_index === null,
    name: stringOr(device.name, label),
    uuid: stringOr(device.uuid, ''),
    memory_total_bytes: numberOrNull(device.memory_total_bytes),
    mig_enabled: device.mig_enabled === true,
    mig: parseMig(device.mig),
    virtualization: stringOr(device.virtualization, ''),
    lost: device.lost === true,
    unavailable: parseReasons(device.unavailable)
  };
}

/**
 * Validate `info.json`. The object shape and a string `nvml_state` are
 * required; a state this frontend does not know becomes `unknown` (the
 * server's string is kept), and other fields fall back to neutral values, so
 * an older or newer server still produces a readable status.
 */
export function parseInfo(data: unknown): IServerInfo {
  if (!isPlainObject(data)) {
    throw new Error('Server info is not a JSON object');
  }
  const state = data.nvml_state;
  if (typeof state !== 'string') {
    throw new Error(`Server info has no NVML state: ${JSON.stringify(state)}`);
  }
  const devices: IDeviceInfo[] = Array.isArray(data.devices)
    ? data.devices.filter(isPlainObject).map(parseDevice)
    : [];
  return {
    version: stringOr(data.version, ''),
    nvml_state: isNvmlState(state) ? state : 'unknown',
    nvml_state_reported: state,
    nvml_message: stringOr(data.nvml_message, ''),
    simulated: data.simulated === true,
    simulated_profile:
      typeof data.simulated_profile === 'string'
        ? data.simulated_profile
        : null,
    gpu_count: numberOr(data.gpu_count, devices.length),
    devices,
    interval_s: numberOr(data.interval_s, 0),
    history_s: numberOr(data.history_s, 0)
  };
}

/** One line of the status description. */
export interface IStatusLine {
  text: string;
  /**
   * `note`: a sentence; `device`: a GPU; `mig`: a MIG device, shown under
   * the GPU it belongs to.
   */
  kind: 'note' | 'device' | 'mig';
  /** The device stopped answering. */
  lost: boolean;
}

/** What the sidebar says about the server's GPUs. */
export interface IStatusSummary {
  kind: 'gpus' | 'simulated' | 'no-gpu' | 'pending' | 'unknown';
  /** One short headline, e.g. `Simulated GPUs (4)` or `No GPU`. */
  headline: string;
  /** Further lines, possibly none: sentences and one line per device. */
  details: IStatusLine[];
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}

function note(text: string): IStatusLine {
  return { text, kind: 'note', lost: false };
}

/** Bytes in decimal SI units, as every dashboard labels them, e.g. `43 GB`. */
function formatBytes(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  const rounded =
    value >= 10 || unit === 0 ? Math.round(value) : value.toFixed(1);
  return `${String(rounded).replace(/\.0$/, '')} ${units[unit]}`;
}

/** `CUDA 1`, `not visible to CUDA`, or nothing when the server did not say. */
function cudaWords(device: IDeviceInfo): string | null {
  if (!device.cuda_index_known) {
    return null;
  }
  return device.cuda_index === null
    ? 'not visible to CUDA'
    : `CUDA ${device.cuda_index}`;
}

/** The MIG profile from a name like `NVIDIA A100-SXM4-80GB MIG 3g.40gb`. */
function migProfile(name: string): string {
  const match = /\bMIG\s+(\S+)$/.exec(name);
  return match ? match[1] : name;
}

function describeDevice(device: IDeviceInfo): IStatusLine {
  const notes: string[] = [];
  const cuda = cudaWords(device);
  if (cuda) {
    notes.push(cuda);
  }
  if (device.kind === 'gpu' && device.mig_enabled) {
    notes.push('MIG enabled');
  }
  const identity = notes.length
    ? `${device.label} (${notes.join(', ')})`
    : device.label;
  const lost = device.lost ? ' (lost: no longer answering)' : '';
  if (device.kind === 'gpu') {
    return {
      text: `${identity}: ${device.name}${lost}`,
      kind: 'device',
      lost: device.lost
    };
  }
  const facts = [migProfile(device.name)];
  if (device.memory_total_bytes !== null) {
    facts.push(formatBytes(device.memory_total_bytes));
  }
  const mig = device.mig;
  if (mig && mig.gpu_slices !== null) {
    const parts = [
      mig.compute_slices !== null ? `${mig.compute_slices} compute` : '',
      mig.memory_slices !== null ? `${mig.memory_slices} memory` : ''
    ].filter(Boolean);
    facts.push(
      plural(mig.gpu_slices, 'GPU slice') +
        (parts.length ? ` (${parts.join(', ')})` : '')
    );
  }
  if (mig && mig.multiprocessors !== null) {
    facts.push(`${mig.multiprocessors} SMs`);
  }
  return {
    text: `↳ ${identity}: ${facts.join(', ')}${lost}`,
    kind: 'mig',
    lost: device.lost
  };
}

/** One line per device, each MIG device right under its parent GPU. */
function describeDevices(devices: IDeviceInfo[]): IStatusLine[] {
  const lines: IStatusLine[] = [];
  const placed = new Set<IDeviceInfo>();
  for (const gpu of devices) {
    if (gpu.kind !== 'gpu') {
      continue;
    }
    lines.push(describeDevice(gpu));
    placed.add(gpu);
    for (const child of devices) {
      if (child.kind === 'mig' && child.parent === gpu.index) {
        lines.push(describeDevice(child));
        placed.add(child);
      }
    }
  }
  // MIG devices whose parent is not listed still show, with their full label.
  for (const device of devices) {
    if (!placed.has(device)) {
      lines.push(describeDevice(device));
    }
  }
  return lines;
}

/**
 * How many physical GPUs and MIG devices: counted from the device list when
 * there is one, else taken from `gpu_count` (which an older server counts
 * GPUs with).
 */
function countDevices(info: IServerInfo): { gpus: number; migs: number } {
  if (info.devices.length === 0) {
    return { gpus: info.gpu_count, migs: 0 };
  }
  const gpus = info.devices.filter(d => d.kind === 'gpu').length;
  return { gpus, migs: info.devices.length - gpus };
}

function migWords(migs: number): string {
  return migs ? ` with ${plural(migs, 'MIG device')}` : '';
}

/** Describe `info.json` for people. */
export function describeStatus(info: IServerInfo): IStatusSummary {
  const devices = describeDevices(info.devices);
  const counts = countDevices(info);
  const message = info.nvml_message ? [note(info.nvml_message)] : [];
  if (info.simulated) {
    const profile = info.simulated_profile
      ? [note(`Simulated hardware: ${info.simulated_profile}.`)]
      : [];
    return {
      kind: 'simulated',
      headline: `Simulated GPUs (${counts.gpus})${migWords(counts.migs)}`,
      details: [...profile, ...devices]
    };
  }
  const state = info.nvml_state;
  if (state === 'unknown') {
    return {
      kind: 'unknown',
      headline: 'GPU status unknown',
      details: [
        note(
          `The server reported a GPU state this page does not know: ` +
            `${JSON.stringify(info.nvml_state_reported)}.`
        ),
        ...message,
        ...devices
      ]
    };
  }
  if (state === 'uninitialized') {
    return {
      kind: 'pending',
      headline: 'Looking for GPUs…',
      details: [note(`${capitalize(STATE_WORDS[state])}.`), ...message]
    };
  }
  if (state === 'ok' && counts.gpus + counts.migs > 0) {
    return {
      kind: 'gpus',
      headline: counts.gpus
        ? plural(counts.gpus, 'GPU') + migWords(counts.migs)
        : plural(counts.migs, 'MIG device'),
      details: devices
    };
  }
  const reason =
    state === 'ok' ? 'no GPU was found on this machine' : STATE_WORDS[state];
  return {
    kind: 'no-gpu',
    headline: 'No GPU',
    details: [note(`No GPU: ${reason}.`), ...message]
  };
}

function capitalize(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
