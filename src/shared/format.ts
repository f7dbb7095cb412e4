/**
 * The words for numbers, said one way everywhere: memory, percentages, ages,
 * a reading's time of day and a kernel's memory; the translation domain they
 * are said in; and the server's numbers read as "not available" (null, never
 * 0). No DOM, no JupyterLab runtime: views, notices and footers all take
 * their words from here, never from one another.
 */
import { nullTranslator, TranslationBundle } from '@jupyterlab/translation';

/** The translation domain of this extension's strings. */
export const TRANSLATION_DOMAIN = 'jupyterlab_nvdashboard';

/** The untranslated bundle, used where no translator is given (tests). */
export const NULL_BUNDLE: TranslationBundle =
  nullTranslator.load(TRANSLATION_DOMAIN);

/** A finite number, or null ("not available", never 0). */
export function numberOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

const MIB = 2 ** 20;
/** Bytes in a GiB: the unit of every memory threshold and of the words. */
export const GIB = 2 ** 30;

/**
 * GPU memory as nvidia-smi and every dashboard count it: GiB with one
 * decimal, MiB below 1 GiB (`80.0 GiB`, `512 MiB`); `n/a` when not
 * available. The one memory formatter.
 */
export function formatMemory(
  bytes: number | null,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  if (bytes === null || !Number.isFinite(bytes)) {
    return trans.__('n/a');
  }
  if (Math.abs(bytes) < GIB) {
    return trans.__('%1 MiB', Math.round(bytes / MIB));
  }
  return trans.__('%1 GiB', (bytes / GIB).toFixed(1));
}

/**
 * Memory in use out of the total, the one phrasing (`20.0 GiB of 80.0 GiB`,
 * as the dashboards say it); just the amount when the total is unknown.
 */
export function memoryUsage(
  used: number | null,
  total: number | null,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const usedText = formatMemory(used, trans);
  return total === null
    ? usedText
    : trans.__('%1 of %2', usedText, formatMemory(total, trans));
}

/** A percentage rounded to a whole number (`80%`), or `n/a`: the one percent formatter. */
export function formatPercent(
  value: number | null,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  return value === null || !Number.isFinite(value)
    ? trans.__('n/a')
    : trans.__('%1%', Math.round(value));
}

/** `5 s`, `3 min`, `2 h`: how old the last reading is. */
export function formatAge(
  ms: number,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 120) {
    return trans.__('%1 s', seconds);
  }
  const minutes = Math.round(seconds / 60);
  if (minutes < 120) {
    return trans.__('%1 min', minutes);
  }
  return trans.__('%1 h', Math.round(minutes / 60));
}

/** `14:03:27`: a reading's time of day, as the dashboards print it. */
export function clockTime(epochSeconds: number): string {
  const at = new Date(epochSeconds * 1000);
  return [at.getHours(), at.getMinutes(), at.getSeconds()]
    .map(part => String(part).padStart(2, '0'))
    .join(':');
}

/** What a kernel holds, as the glance reports it (an `IGpuKernel` is one). */
export interface IHeldMemory {
  /** Its own memory (bytes). */
  memory_bytes: number;
  /** False when some of its processes' memory is not reported. */
  memory_known: boolean;
  /** Memory reported only together with other processes (bytes). */
  shared_memory_bytes: number | null;
}

/**
 * What a kernel holds, as the driver reports it: its own memory ("at least"
 * when some of its processes' memory is not reported), memory reported only
 * together with other processes ("shared", as /GPU-Processes says), or, with
 * neither, that the driver did not report it: never "0 B" for memory that
 * is held but not reported.
 */
export function kernelMemoryText(
  kernel: IHeldMemory,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const parts: string[] = [];
  const own = formatMemory(kernel.memory_bytes, trans);
  if (kernel.memory_known) {
    parts.push(own);
  } else if (kernel.memory_bytes > 0) {
    parts.push(trans.__('at least %1', own));
  }
  if (kernel.shared_memory_bytes !== null) {
    parts.push(
      trans.__('%1 shared', formatMemory(kernel.shared_memory_bytes, trans))
    );
  }
  return parts.length
    ? parts.join(trans.__(', '))
    : trans.__('memory not reported');
}
