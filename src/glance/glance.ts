/**
 * GPUs at a glance, the data and its words: `glance.json` validated, and
 * what the status bar and its tooltip say. No DOM: the model is in
 * `glanceModel.ts`, the status-bar item in `statusItem.ts`, the sidebar's
 * live section in `glancePanel.ts`.
 *
 * Over 400 lines: the glance document's types (a third of it) sit with the
 * one validation that makes them true, so a field is added in one file.
 */
import { TranslationBundle } from '@jupyterlab/translation';

import {
  clockTime,
  formatAge,
  formatPercent,
  memoryUsage,
  NULL_BUNDLE,
  numberOrNull
} from '../shared/format';

/** One device now; `null` means not available. */
export interface IGlanceDevice {
  index: number;
  label: string;
  kind: string;
  utilization_pct: number | null;
  memory_used_bytes: number | null;
  memory_total_bytes: number | null;
  /** The server's judgment (its `diagnosis/free.py`): shown, never re-derived. */
  free: boolean;
  /** Why it is free or not, in words. */
  free_why: string;
  /** The current user's processes hold it. */
  mine: boolean;
}

/** How a kernel's idle judgment came out (`busy` whenever Jupyter runs a cell). */
export type IdleState = 'idle' | 'busy' | 'cannot_tell';

/**
 * Whether a kernel that holds GPU memory does GPU work, as the server
 * judged it: the signal used, its figures, and for an idle one how long.
 */
export interface IKernelIdle {
  state: IdleState;
  /** The signal used, in words ('none' when it cannot tell). */
  signal: string;
  /** GPU memory the kernel and its children hold now. */
  held_bytes: number;
  gpus: string[];
  /** Idle: seconds with no GPU work and no cell run; null otherwise. */
  idle_s: number | null;
  /** Stable while the kernel stays idle; new once it works again. */
  episode: string;
  /** The judgment in one sentence. */
  text: string;
}

/** One of the current user's kernels that holds GPU memory. */
export interface IGpuKernel {
  kernel_id: string;
  path: string;
  memory_bytes: number;
  /** False when the driver did not report some of its processes' memory. */
  memory_known: boolean;
  /**
   * Memory the driver reports only for a group of processes together, the
   * kernel's among them (a container's processes seen from another PID
   * namespace); null when there is none.
   */
  shared_memory_bytes: number | null;
  devices: string[];
  /**
   * The kernel's own GPU activity in the newest pass, %, by its own signal
   * (its per-process SM samples, or its GPU's where it is the only process
   * or nobody worked); null where that cannot be told (a shared GPU without
   * per-process samples) or from an older server.
   */
  own_pct: number | null;
  /** Which signal `own_pct` is read from, in words ('' when null). */
  own_signal: string;
  /** The idle judgment; null from a server that does not judge. */
  idle: IKernelIdle | null;
  /**
   * The kernel's running cell so far: `/cell.json`'s answer with
   * `running: true` (parsed by cellReport.ts, which the live footer and the
   * live cell notice read); null when it runs none, or from an older server.
   */
  cell: unknown;
}

/** Why a GPU that holds one of the user's kernels is slow: its first finding. */
export interface IGlanceDiagnosis {
  index: number;
  label: string;
  cause: string;
  /** A few words: the device, the cause and one figure. */
  brief: string;
  /** The finding in words, with its figures and how sure it is. */
  line: string;
  /** One thing to try, only when the finding is the user's ('' otherwise). */
  advice: string;
  /**
   * Whose the finding is, as the server judged it: `yours` (the user's
   * kernels are all that runs there, and they work) or `gpu` (the GPU's,
   * with its other processes, or over kernels that do no GPU work).
   */
  whose: 'yours' | 'gpu';
  /** The user's notebooks whose kernels are on this GPU. */
  your_kernels: string[];
  /** Those of them that hold memory and do no GPU work. */
  idle_kernels: string[];
  /** How many other processes are on this GPU, and their users where known. */
  other_processes: number;
  other_users: string[];
}

export interface IGlance {
  devices: IGlanceDevice[];
  kernels: IGpuKernel[];
  diagnoses: IGlanceDiagnosis[];
  /** The server has not read its GPUs yet (no device may still become some). */
  reading_gpus: boolean;
  /** When the server took the devices' reading (epoch seconds); null when unknown. */
  time: number | null;
}

/**
 * What the views show: the last good reading and whether the last poll
 * failed. Times are `Date.now()` milliseconds.
 */
export interface IGlanceState {
  glance: IGlance | null;
  /** When `glance` was read; null before the first answer. */
  readAt: number | null;
  /** Why the last poll failed; null when it succeeded. */
  error: string | null;
  /** When the last poll failed; null when it succeeded. */
  failedAt: number | null;
}

/**
 * Which figure the status bar shows: `summary`, the user's own GPU, else how
 * many GPUs are free; `each`, each GPU's utilization.
 */
export type StatusFigure = 'summary' | 'each';

/** How often the glance is polled while JupyterLab is visible (ms). */
export const GLANCE_INTERVAL_MS = 2000;

/** Sidebar section classes (tests and browser tests find them by these). */
export const GLANCE_CLASS = 'nvdashboard-glance';
export const KERNEL_ROW_CLASS = 'nvdashboard-kernel';
export const STATUS_ITEM_CLASS = 'nvdashboard-statusbar-item';
export const DIAGNOSIS_CLASS = 'nvdashboard-diagnoses';
export const STALE_CLASS = 'nvdashboard-stale';

function strings(value: unknown): string[] {
  return Array.isArray(value)
    ? value.filter((x): x is string => typeof x === 'string')
    : [];
}

const IDLE_STATES: ReadonlyArray<string> = ['idle', 'busy', 'cannot_tell'];

/** A kernel's `idle` object, or null when it is missing or malformed. */
export function parseIdle(value: unknown): IKernelIdle | null {
  const i = (value ?? {}) as Record<string, unknown>;
  if (
    typeof i.state !== 'string' ||
    !IDLE_STATES.includes(i.state) ||
    typeof i.episode !== 'string'
  ) {
    return null;
  }
  const idleS = numberOrNull(i.idle_s);
  return {
    state: i.state as IdleState,
    signal: typeof i.signal === 'string' ? i.signal : '',
    held_bytes: numberOrNull(i.held_bytes) ?? 0,
    gpus: strings(i.gpus),
    // Only an idle kernel has been idle for some time.
    idle_s: i.state === 'idle' && idleS !== null && idleS >= 0 ? idleS : null,
    episode: i.episode,
    text: typeof i.text === 'string' ? i.text : ''
  };
}

/** Validate `glance.json`; anything malformed is left out, never thrown. */
export function parseGlance(body: unknown): IGlance {
  const data = (body ?? {}) as Record<string, unknown>;
  const devices: IGlanceDevice[] = [];
  for (const item of Array.isArray(data.devices) ? data.devices : []) {
    const d = (item ?? {}) as Record<string, unknown>;
    if (typeof d.index !== 'number' || typeof d.label !== 'string') {
      continue;
    }
    devices.push({
      index: d.index,
      label: d.label,
      kind: typeof d.kind === 'string' ? d.kind : 'gpu',
      utilization_pct: numberOrNull(d.utilization_pct),
      memory_used_bytes: numberOrNull(d.memory_used_bytes),
      memory_total_bytes: numberOrNull(d.memory_total_bytes),
      free: d.free === true,
      free_why: typeof d.free_why === 'string' ? d.free_why : '',
      mine: d.mine === true
    });
  }
  const kernels: IGpuKernel[] = [];
  for (const item of Array.isArray(data.kernels) ? data.kernels : []) {
    const k = (item ?? {}) as Record<string, unknown>;
    if (typeof k.kernel_id !== 'string' || typeof k.path !== 'string') {
      continue;
    }
    kernels.push({
      kernel_id: k.kernel_id,
      path: k.path,
      memory_bytes: numberOrNull(k.memory_bytes) ?? 0,
      memory_known: k.memory_known !== false,
      shared_memory_bytes: numberOrNull(k.shared_memory_bytes),
      devices: strings(k.devices),
      own_pct: numberOrNull(k.own_pct),
      own_signal: typeof k.own_signal === 'string' ? k.own_signal : '',
      idle: parseIdle(k.idle),
      cell: k.cell ?? null
    });
  }
  const diagnoses: IGlanceDiagnosis[] = [];
  for (const item of Array.isArray(data.diagnoses) ? data.diagnoses : []) {
    const g = (item ?? {}) as Record<string, unknown>;
    if (typeof g.index !== 'number' || typeof g.line !== 'string') {
      continue;
    }
    diagnoses.push({
      index: g.index,
      label: typeof g.label === 'string' ? g.label : `GPU ${g.index}`,
      cause: typeof g.cause === 'string' ? g.cause : 'unknown',
      brief: typeof g.brief === 'string' ? g.brief : g.line,
      line: g.line,
      advice: typeof g.advice === 'string' ? g.advice : '',
      whose: g.whose === 'yours' ? 'yours' : 'gpu',
      your_kernels: strings(g.your_kernels),
      idle_kernels: strings(g.idle_kernels),
      other_processes:
        typeof g.other_processes === 'number' && g.other_processes > 0
          ? g.other_processes
          : 0,
      other_users: strings(g.other_users)
    });
  }
  return {
    devices,
    kernels,
    diagnoses,
    reading_gpus: data.reading_gpus === true,
    time: numberOrNull(data.time)
  };
}

/**
 * The stale state in words, or null while the last poll succeeded:
 * `server unreachable` before any reading, else `stale` with its age.
 */
export function staleWords(
  state: IGlanceState,
  now: number = Date.now(),
  trans: TranslationBundle = NULL_BUNDLE
): string | null {
  if (state.error === null) {
    return null;
  }
  if (state.readAt === null) {
    return trans.__('server unreachable');
  }
  return trans.__('stale, read %1 ago', formatAge(now - state.readAt, trans));
}

/** The physical GPUs (or every device when there is none, e.g. MIG only). */
function shownDevices(glance: IGlance): IGlanceDevice[] {
  const gpus = glance.devices.filter(d => d.kind === 'gpu');
  return gpus.length ? gpus : glance.devices;
}

export function memoryFraction(d: IGlanceDevice): number | null {
  return d.memory_used_bytes !== null && d.memory_total_bytes
    ? d.memory_used_bytes / d.memory_total_bytes
    : null;
}

/**
 * The user's own GPU: the first, by index, that their processes hold. It
 * stays the same from poll to poll, unlike the busiest, which hopped.
 */
export function yourDevice(glance: IGlance): IGlanceDevice | null {
  return shownDevices(glance).find(d => d.mine) ?? null;
}

/** `2 of 4 GPUs free`, counting the server's judgment. */
export function freeText(
  glance: IGlance,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const shown = shownDevices(glance);
  const free = shown.filter(d => d.free).length;
  return trans._n(
    '%2 of %1 GPU free',
    '%2 of %1 GPUs free',
    shown.length,
    free
  );
}

/**
 * A few characters for the status bar: the user's own GPU
 * (`GPU 1 80% · 20.0 GiB of 80.0 GiB`), else how many GPUs are free
 * (`2 of 4 GPUs free`), or each GPU's utilization (`GPU 40% 80%`), then
 * `stale …` after a failed poll. Never a mean, which hides a full GPU.
 */
export function statusText(
  state: IGlanceState | null,
  figure: StatusFigure = 'summary',
  now: number = Date.now(),
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const glance = state?.glance ?? null;
  const stale = state ? staleWords(state, now, trans) : null;
  if (!glance || glance.devices.length === 0) {
    return stale ? trans.__('GPU: %1', stale) : trans.__('GPU –');
  }
  let text: string;
  if (figure === 'each') {
    const figures = shownDevices(glance).map(d =>
      formatPercent(d.utilization_pct, trans)
    );
    text = trans.__('GPU %1', figures.join(' '));
  } else {
    const d = yourDevice(glance);
    if (d === null) {
      text = freeText(glance, trans);
    } else {
      const memory =
        d.memory_used_bytes !== null
          ? memoryUsage(d.memory_used_bytes, d.memory_total_bytes, trans)
          : trans.__('memory n/a');
      text = trans.__(
        '%1 %2 · %3',
        d.label,
        formatPercent(d.utilization_pct, trans),
        memory
      );
    }
  }
  return stale ? trans.__('%1 · %2', text, stale) : text;
}

/** One line per device for the status bar's tooltip. */
export function deviceLine(
  d: IGlanceDevice,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const line = trans.__(
    '%1: %2 utilization, %3 memory',
    d.label,
    formatPercent(d.utilization_pct, trans),
    memoryUsage(d.memory_used_bytes, d.memory_total_bytes, trans)
  );
  const marks = [
    ...(d.mine ? [trans.__('yours')] : []),
    ...(d.free ? [trans.__('free')] : [])
  ];
  return marks.length ? trans.__('%1 (%2)', line, marks.join(', ')) : line;
}

/**
 * The status bar's tooltip: every GPU on a line of its own, the stale state,
 * and why the GPUs of your kernels are slow.
 */
export function statusTooltip(
  state: IGlanceState | null,
  now: number = Date.now(),
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const lines = [
    trans.__('GPU utilization and memory (click for GPU dashboards)')
  ];
  const glance = state?.glance ?? null;
  if (glance && glance.time !== null) {
    // Views update at their own pace: each says which reading it shows.
    lines.push(trans.__('Reading of %1', clockTime(glance.time)));
  }
  if (glance) {
    lines.push(...glance.devices.map(d => deviceLine(d, trans)));
  }
  if (state && state.error !== null) {
    lines.push(
      trans.__(
        'The dashboard server did not answer (%1); %2.',
        state.error,
        staleWords(state, now, trans) ?? ''
      )
    );
  }
  if (glance && glance.diagnoses.length) {
    lines.push(trans.__('The GPUs of your kernels:'));
    for (const d of glance.diagnoses) {
      lines.push(d.advice ? trans.__('%1 Try: %2.', d.line, d.advice) : d.line);
    }
  }
  return lines.join('\n');
}
