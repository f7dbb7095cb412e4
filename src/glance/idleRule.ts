/**
 * The idle rule, one place for every view: a kernel is an idle holder when
 * the server judges it `idle` and both its held memory and its idle time are
 * at or above the thresholds (the user's settings, or the admin's cull);
 * and the words said beside one. The sidebar's kernel rows, the notebook
 * toolbar and the idle notice all judge and say it through this module.
 */
import { TranslationBundle } from '@jupyterlab/translation';

import { formatAge, GIB, NULL_BUNDLE } from '../shared/format';
import { IGpuKernel } from './glance';

/** The user's notice settings (schema/plugin.json). */
export interface IIdleNoticeSettings {
  /** Notify about idle kernels at all. */
  enabled: boolean;
  /** Only kernels holding at least this much GPU memory (GiB). */
  memoryGiB: number;
  /** Only after this many minutes with no GPU work. */
  idleMinutes: number;
  /** How long "Not now" stays quiet (minutes). */
  snoozeMinutes: number;
}

export const DEFAULT_NOTICE_SETTINGS: IIdleNoticeSettings = {
  enabled: true,
  memoryGiB: 1,
  idleMinutes: 30,
  snoozeMinutes: 60
};

/** An idle holder: held and idle time, each at or above its threshold. */
export interface IIdleThresholds {
  minBytes: number;
  idleSeconds: number;
}

/** The user's thresholds in bytes and seconds. */
export function userThresholds(settings: IIdleNoticeSettings): IIdleThresholds {
  return {
    minBytes: settings.memoryGiB * GIB,
    idleSeconds: settings.idleMinutes * 60
  };
}

/** Whether the kernel is judged idle and past both thresholds. */
export function isIdleHolder(
  kernel: IGpuKernel,
  thresholds: IIdleThresholds
): boolean {
  const idle = kernel.idle;
  return (
    idle !== null &&
    idle.state === 'idle' &&
    idle.idle_s !== null &&
    idle.idle_s >= thresholds.idleSeconds &&
    idle.held_bytes >= thresholds.minBytes
  );
}

/** What the sidebar says beside an idle holder: `idle on GPU for 42 min`. */
export function idleWords(
  kernel: IGpuKernel,
  thresholds: IIdleThresholds,
  trans: TranslationBundle = NULL_BUNDLE
): string | null {
  if (!isIdleHolder(kernel, thresholds)) {
    return null;
  }
  return trans.__(
    'idle on GPU for %1',
    formatAge((kernel.idle?.idle_s ?? 0) * 1000, trans)
  );
}
