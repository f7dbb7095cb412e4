/**
 * The dashboard list's documents: `index.json` and `info.json` validated,
 * and the server's status (NVML, CUDA, each GPU and MIG slice) in plain
 * words. No DOM, no JupyterLab runtime: safe to use anywhere and in tests.
 *
 * Over 400 lines: most of it is the status's words, one function per kind of
 * device state (NVML, CUDA, MIG, each GPU), which read best together.
 */
import { TranslationBundle } from '@jupyterlab/translation';

import { formatMemory, NULL_BUNDLE, numberOrNull } from '../shared/format';
import {
  DashboardIndex,
  IDeviceInfo,
  IMigInfo,
  IServerInfo,
  NvmlState
} from '../shared/tokens';
import { routePath } from '../shared/urls';

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
    try {
      // The same rule the URL builder applies: no '.', '..' or empty segment.
      routePath(route);
    } catch {
      throw new Error(
        `Dashboard index has an invalid route: ${JSON.stringify(route)}`
      );
    }
    index[route] = title;
  }
  return index;
}

/** The NVML states this frontend knows. */
const NVML_STATES: ReadonlySet<string> = new Set<NvmlState>([
  'uninitialized',
  'ok',
  'library_not_found',
  'driver_not_loaded',
  'no_permission',
  'no_devices',
  'error'
]);

function isNvmlState(value: string): value is NvmlState {
  return NVML_STATES.has(value);
}

function numberOr(value: unknown, fallback: number): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : fallback;
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
    reading_gpus: data.reading_gpus === true,
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

function note(text: string): IStatusLine {
  return { text, kind: 'note', lost: false };
}

/** `CUDA 1`, `not visible to CUDA`, or nothing when the server did not say. */
function cudaWords(
  device: IDeviceInfo,
  trans: TranslationBundle
): string | null {
  if (!device.cuda_index_known) {
    return null;
  }
  return device.cuda_index === null
    ? trans.__('not visible to CUDA')
    : trans.__('CUDA %1', device.cuda_index);
}

/** The MIG profile from a name like `NVIDIA A100-SXM4-80GB MIG 3g.40gb`. */
function migProfile(name: string): string {
  const match = /\bMIG\s+(\S+)$/.exec(name);
  return match ? match[1] : name;
}

function describeDevice(
  device: IDeviceInfo,
  trans: TranslationBundle
): IStatusLine {
  const notes: string[] = [];
  const cuda = cudaWords(device, trans);
  if (cuda) {
    notes.push(cuda);
  }
  if (device.kind === 'gpu' && device.mig_enabled) {
    notes.push(trans.__('MIG enabled'));
  }
  // Each piece is put together by a translated pattern, never by joining
  // fragments: a language may order them otherwise.
  const identity = notes.length
    ? trans.__('%1 (%2)', device.label, notes.join(trans.__(', ')))
    : device.label;
  const lost = (text: string): string =>
    device.lost ? trans.__('%1 (lost: no longer answering)', text) : text;
  if (device.kind === 'gpu') {
    return {
      text: lost(trans.__('%1: %2', identity, device.name)),
      kind: 'device',
      lost: device.lost
    };
  }
  const facts = [migProfile(device.name)];
  if (device.memory_total_bytes !== null) {
    facts.push(formatMemory(device.memory_total_bytes, trans));
  }
  const mig = device.mig;
  if (mig && mig.gpu_slices !== null) {
    const parts = [
      mig.compute_slices !== null
        ? trans.__('%1 compute', mig.compute_slices)
        : '',
      mig.memory_slices !== null ? trans.__('%1 memory', mig.memory_slices) : ''
    ].filter(Boolean);
    const slices = trans._n('%1 GPU slice', '%1 GPU slices', mig.gpu_slices);
    facts.push(
      parts.length
        ? trans.__('%1 (%2)', slices, parts.join(trans.__(', ')))
        : slices
    );
  }
  if (mig && mig.multiprocessors !== null) {
    facts.push(trans.__('%1 SMs', mig.multiprocessors));
  }
  return {
    text: lost(trans.__('↳ %1: %2', identity, facts.join(trans.__(', ')))),
    kind: 'mig',
    lost: device.lost
  };
}

/** One line per device, each MIG device right under its parent GPU. */
function describeDevices(
  devices: IDeviceInfo[],
  trans: TranslationBundle
): IStatusLine[] {
  const lines: IStatusLine[] = [];
  const placed = new Set<IDeviceInfo>();
  for (const gpu of devices) {
    if (gpu.kind !== 'gpu') {
      continue;
    }
    lines.push(describeDevice(gpu, trans));
    placed.add(gpu);
    for (const child of devices) {
      if (child.kind === 'mig' && child.parent === gpu.index) {
        lines.push(describeDevice(child, trans));
        placed.add(child);
      }
    }
  }
  // MIG devices whose parent is not listed still show, with their full label.
  for (const device of devices) {
    if (!placed.has(device)) {
      lines.push(describeDevice(device, trans));
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

/** `2 GPUs`, or `2 GPUs with 3 MIG devices`: one pattern, two counts. */
function countWords(
  gpus: string,
  migs: number,
  trans: TranslationBundle
): string {
  return migs
    ? trans.__(
        '%1 with %2',
        gpus,
        trans._n('%1 MIG device', '%1 MIG devices', migs)
      )
    : gpus;
}

/** Plain-words reason for each NVML state. */
function stateWords(state: NvmlState, trans: TranslationBundle): string {
  switch (state) {
    case 'uninitialized':
      return trans.__('GPU monitoring is still starting');
    case 'ok':
      return trans.__('GPU monitoring is available');
    case 'library_not_found':
      return trans.__('the NVIDIA management library (NVML) was not found');
    case 'driver_not_loaded':
      return trans.__('the NVIDIA driver is not loaded');
    case 'no_permission':
      return trans.__('no permission to query the GPUs');
    case 'no_devices':
      return trans.__('no GPU is visible to this process');
    case 'error':
      return trans.__('the NVIDIA management library reported an error');
  }
}

/** Describe `info.json` for people, in the user's language. */
export function describeStatus(
  info: IServerInfo,
  trans: TranslationBundle = NULL_BUNDLE
): IStatusSummary {
  const devices = describeDevices(info.devices, trans);
  const counts = countDevices(info);
  const message = info.nvml_message ? [note(info.nvml_message)] : [];
  if (info.simulated) {
    const profile = info.simulated_profile
      ? [note(trans.__('Simulated hardware: %1.', info.simulated_profile))]
      : [];
    return {
      kind: 'simulated',
      headline: countWords(
        trans.__('Simulated GPUs (%1)', counts.gpus),
        counts.migs,
        trans
      ),
      details: [...profile, ...devices]
    };
  }
  const state = info.nvml_state;
  if (state === 'unknown') {
    return {
      kind: 'unknown',
      headline: trans.__('GPU status unknown'),
      details: [
        note(
          trans.__(
            'The server reported a GPU state this page does not know: %1.',
            JSON.stringify(info.nvml_state_reported)
          )
        ),
        ...message,
        ...devices
      ]
    };
  }
  if (state === 'uninitialized') {
    return {
      kind: 'pending',
      headline: trans.__('Looking for GPUs…'),
      details: [note(trans.__('GPU monitoring is still starting.')), ...message]
    };
  }
  if (state === 'ok' && counts.gpus + counts.migs > 0) {
    return {
      kind: 'gpus',
      headline: counts.gpus
        ? countWords(
            trans._n('%1 GPU', '%1 GPUs', counts.gpus),
            counts.migs,
            trans
          )
        : trans._n('%1 MIG device', '%1 MIG devices', counts.migs),
      details: devices
    };
  }
  const reason =
    state === 'ok'
      ? trans.__('no GPU was found on this machine')
      : stateWords(state, trans);
  return {
    kind: 'no-gpu',
    headline: trans.__('No GPU'),
    details: [note(trans.__('No GPU: %1.', reason)), ...message]
  };
}
