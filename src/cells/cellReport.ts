/**
 * What a cell did on the GPU, the data and its words: `/cell.json`
 * validated, and the lines its footer shows on hover or focus. The verdict
 * is the server's (it judges a kernel's process tree over the span with the
 * same history and diagnosis as every page); this module shows it and never
 * re-derives it. No DOM: the footer is in `cellFooter.ts`.
 */
import { TranslationBundle } from '@jupyterlab/translation';

import {
  clockTime,
  formatMemory,
  formatPercent,
  NULL_BUNDLE,
  numberOrNull
} from '../shared/format';

/** Which cells get a footer (a setting): none, those that touched a GPU, all. */
export type CellFooterMode = 'off' | 'gpu' | 'all';

export interface ICellMemory {
  start_bytes: number | null;
  end_bytes: number | null;
  peak_bytes: number | null;
  change_bytes: number | null;
}

export interface ICellFinding {
  cause: string;
  /** The finding in words, with its figures. */
  line: string;
  /** One thing to try ('' when none). */
  advice: string;
}

/** Which signal the kernel's GPU work was read from (diagnosis/idle.py's rules). */
export type CellSignal = 'per-process' | 'device' | 'cannot-tell';

export interface ICellGpu {
  index: number;
  label: string;
  /** NVML's UUID (`GPU-…`, `MIG-…`); null when the server did not say. */
  uuid: string | null;
  /** The MIG device's label, or null. */
  mig: string | null;
  /** The GPU disappeared during or after the span. */
  lost: boolean;
  memory: ICellMemory;
  signal: CellSignal;
  /** The kernel's (or its only-process GPU's) SM share, %; null: cannot tell. */
  sm_pct: number | null;
  /** Share of the span the GPU was working, 0..1; null: not known. */
  working_share: number | null;
  findings: ICellFinding[];
}

/** GET `/cell.json` for a kernel's span; resolves with its parsed body. */
export type FetchCellReport = (
  kernelId: string,
  start: string,
  end: string
) => Promise<unknown>;

export interface ICellReport {
  kernel: string;
  notebook: string | null;
  start_s: number;
  end_s: number;
  duration_s: number;
  /** From the in-memory history, or the store's buckets (an older span). */
  judged_from: 'memory' | 'store';
  resolution_s: number | null;
  too_short: boolean;
  touched_gpu: boolean;
  gpus: ICellGpu[];
  /** The server's verdict in one line. */
  verdict: string;
  /** The cell's execution count, where the server knows it. */
  count: number | null;
  /** The span so far of a cell that runs on (a live footer's report). */
  running: boolean;
  /** How long of the span the kernel held GPU memory (s). */
  held_s: number;
  /**
   * What the cell is worth a notice for, as the server judged it
   * (`held-idle`, `starved`, `memory-bound`), or null: nothing, or a GPU
   * shared with others, where it cannot tell.
   */
  notice: string | null;
}

const SIGNALS: ReadonlyArray<string> = ['per-process', 'device', 'cannot-tell'];

function parseFinding(value: unknown): ICellFinding | null {
  const f = (value ?? {}) as Record<string, unknown>;
  if (typeof f.line !== 'string') {
    return null;
  }
  return {
    cause: typeof f.cause === 'string' ? f.cause : 'unknown',
    line: f.line,
    advice: typeof f.advice === 'string' ? f.advice : ''
  };
}

function parseGpu(value: unknown): ICellGpu | null {
  const g = (value ?? {}) as Record<string, unknown>;
  if (typeof g.index !== 'number') {
    return null;
  }
  const m = (g.memory ?? {}) as Record<string, unknown>;
  const share = numberOrNull(g.working_share);
  return {
    index: g.index,
    label: typeof g.label === 'string' ? g.label : `GPU ${g.index}`,
    uuid: typeof g.uuid === 'string' && g.uuid ? g.uuid : null,
    mig: typeof g.mig === 'string' && g.mig ? g.mig : null,
    lost: g.lost === true,
    memory: {
      start_bytes: numberOrNull(m.start_bytes),
      end_bytes: numberOrNull(m.end_bytes),
      peak_bytes: numberOrNull(m.peak_bytes),
      change_bytes: numberOrNull(m.change_bytes)
    },
    signal:
      typeof g.signal === 'string' && SIGNALS.includes(g.signal)
        ? (g.signal as CellSignal)
        : 'cannot-tell',
    sm_pct: numberOrNull(g.sm_pct),
    working_share: share === null ? null : Math.max(0, Math.min(1, share)),
    findings: (Array.isArray(g.findings) ? g.findings : [])
      .map(parseFinding)
      .filter((f): f is ICellFinding => f !== null)
  };
}

/**
 * Validate `/cell.json`; null when it is not a report (no verdict or span).
 * Malformed parts are left out, never thrown.
 */
export function parseCellReport(body: unknown): ICellReport | null {
  const r = (body ?? {}) as Record<string, unknown>;
  const start = numberOrNull(r.start_s);
  const end = numberOrNull(r.end_s);
  if (typeof r.verdict !== 'string' || start === null || end === null) {
    return null;
  }
  return {
    kernel: typeof r.kernel === 'string' ? r.kernel : '',
    notebook: typeof r.notebook === 'string' ? r.notebook : null,
    start_s: start,
    end_s: end,
    duration_s: numberOrNull(r.duration_s) ?? Math.max(0, end - start),
    judged_from: r.judged_from === 'store' ? 'store' : 'memory',
    resolution_s: numberOrNull(r.resolution_s),
    too_short: r.too_short === true,
    touched_gpu: r.touched_gpu === true,
    gpus: (Array.isArray(r.gpus) ? r.gpus : [])
      .map(parseGpu)
      .filter((g): g is ICellGpu => g !== null),
    verdict: r.verdict,
    count: numberOrNull(r.count),
    running: r.running === true,
    held_s: numberOrNull(r.held_s) ?? 0,
    notice: typeof r.notice === 'string' && r.notice ? r.notice : null
  };
}

/** What a running cell's footer shows beside its report, from the glance. */
export interface ILiveFigures {
  /** How long the cell has run, on the server's clock (s). */
  running_s: number;
  /** The kernel's GPU memory now (bytes). */
  memory_bytes: number;
  /** The kernel's own GPU work over the last pass (%); null: cannot tell. */
  own_pct: number | null;
}

/** `45 s`, `3 min 05 s`, `2 h 04 min`: how long a cell has run. */
export function runningTime(
  seconds: number,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const s = Math.max(0, Math.floor(seconds));
  const pad = (n: number): string => String(n).padStart(2, '0');
  if (s < 60) {
    return trans.__('%1 s', s);
  }
  if (s < 3600) {
    return trans.__('%1 min %2 s', Math.floor(s / 60), pad(s % 60));
  }
  return trans.__(
    '%1 h %2 min',
    Math.floor(s / 3600),
    pad(Math.floor(s / 60) % 60)
  );
}

/**
 * A running cell's footer line: how long it has run, its GPUs with their
 * memory now and peak so far, its work now, and the verdict so far in the
 * finished footer's words (the server's, by the same rules).
 */
export function liveLine(
  report: ICellReport,
  live: ILiveFigures,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const peak = Math.max(
    0,
    ...report.gpus.map(gpu => gpu.memory.peak_bytes ?? 0)
  );
  const gpus = report.gpus.map(gpu => gpu.label).join(', ');
  const parts = [trans.__('running %1', runningTime(live.running_s, trans))];
  if (gpus) {
    parts.push(
      trans.__(
        '%1: %2 now, peak %3',
        gpus,
        formatMemory(live.memory_bytes, trans),
        formatMemory(Math.max(peak, live.memory_bytes), trans)
      )
    );
  }
  parts.push(
    live.own_pct === null
      ? trans.__('work now: cannot tell')
      : trans.__('working %1 now', formatPercent(live.own_pct, trans))
  );
  parts.push(trans.__('so far: %1', report.verdict));
  return parts.join(' · ');
}

/** Whether a cell with this report gets a footer under `mode`. */
export function showsFooter(
  report: ICellReport,
  mode: CellFooterMode
): boolean {
  return mode === 'all' || (mode === 'gpu' && report.touched_gpu);
}

/** `12:03:04–12:03:45`: a span's times of day, as the dashboards print them. */
export function spanWords(report: ICellReport): string {
  return `${clockTime(report.start_s)}–${clockTime(report.end_s)}`;
}

/** A memory change with its sign (`+2.1 GiB`, `-512 MiB`). */
function signedMemory(bytes: number, trans: TranslationBundle): string {
  const text = formatMemory(Math.abs(bytes), trans);
  return bytes < 0 ? trans.__('-%1', text) : trans.__('+%1', text);
}

/** The memory line of one GPU: start → end, peak, change. */
function memoryLine(gpu: ICellGpu, trans: TranslationBundle): string {
  const m = gpu.memory;
  const change =
    m.change_bytes === null ? '' : ` (${signedMemory(m.change_bytes, trans)})`;
  return trans.__(
    'memory %1 → %2, peak %3%4',
    formatMemory(m.start_bytes, trans),
    formatMemory(m.end_bytes, trans),
    formatMemory(m.peak_bytes, trans),
    change
  );
}

/** What the GPU work was read from, with its figure. */
function workLine(gpu: ICellGpu, trans: TranslationBundle): string {
  const working =
    gpu.working_share === null
      ? ''
      : trans.__(
          ', working %1 of the cell',
          formatPercent(gpu.working_share * 100, trans)
        );
  if (gpu.signal === 'per-process') {
    return trans.__(
      "SM %1 (the kernel's own samples)%2",
      formatPercent(gpu.sm_pct, trans),
      working
    );
  }
  if (gpu.signal === 'device') {
    return trans.__(
      "SM %1 (the GPU's: the kernel was its only process)%2",
      formatPercent(gpu.sm_pct, trans),
      working
    );
  }
  return trans.__(
    'GPU work: cannot tell (the GPU is shared and the driver gives no per-process samples)%1',
    working
  );
}

/**
 * The figures and findings the footer shows on hover or focus: the span and
 * what it was judged from, then per GPU its memory, its work and the
 * diagnosis findings over exactly that span.
 */
export function cellDetailLines(
  report: ICellReport,
  count: number | null,
  trans: TranslationBundle = NULL_BUNDLE
): string[] {
  const seconds = Math.round(report.duration_s * 10) / 10;
  const since = clockTime(report.start_s);
  const lines: string[] = [
    report.running
      ? count === null
        ? trans.__('This cell runs since %1; so far (%2 s):', since, seconds)
        : trans.__(
            'Cell [%1] runs since %2; so far (%3 s):',
            count,
            since,
            seconds
          )
      : count === null
        ? trans.__('This cell ran %1 (%2 s).', spanWords(report), seconds)
        : trans.__(
            'Cell [%1] ran %2 (%3 s).',
            count,
            spanWords(report),
            seconds
          )
  ];
  if (report.judged_from === 'store') {
    lines.push(
      trans.__(
        'Older than the live history: judged from the history store, at %1 s resolution.',
        report.resolution_s ?? '?'
      )
    );
  }
  if (report.too_short) {
    lines.push(
      trans.__('Too short to judge: fewer than two readings fell in it.')
    );
  }
  for (const gpu of report.gpus) {
    const name = gpu.mig ? trans.__('%1 (%2)', gpu.label, gpu.mig) : gpu.label;
    lines.push(
      trans.__(
        '%1: %2; %3.',
        name,
        memoryLine(gpu, trans),
        workLine(gpu, trans)
      )
    );
    if (gpu.lost) {
      lines.push(
        trans.__('%1 disappeared during or after this cell.', gpu.label)
      );
    }
    for (const finding of gpu.findings) {
      lines.push(finding.line);
      if (finding.advice) {
        lines.push(trans.__('Try: %1.', finding.advice));
      }
    }
  }
  return lines;
}

/** The label the timeline marks the cell's span with. */
export function cellLabel(
  count: number | null,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  return count === null ? trans.__('cell') : trans.__('cell [%1]', count);
}
