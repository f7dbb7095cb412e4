/**
 * When an idle notice is due, and what it and the cull's report say: pure
 * functions of a kernel, the settings and the cull's policy, within
 * JupyterLab's cut of a notification's message.
 */
import { TranslationBundle } from '@jupyterlab/translation';

import { IGpuKernel } from '../glance/glance';
import {
  IIdleNoticeSettings,
  isIdleHolder,
  userThresholds
} from '../glance/idleRule';
import { formatAge, formatMemory, NULL_BUNDLE } from '../shared/format';
import { cullThresholds, ICullPolicy, ICullRecord } from './culls';
import { INoticeMemory } from './noticeMemory';

/** JupyterLab cuts a notification's message at this many characters. */
export const NOTICE_MAX_CHARS = 140;

/** Whose rule makes a notice due: the user's settings, or the admin's cull. */
export type NoticeReason = 'user' | 'cull';

/**
 * Whether the kernel's notice is due now, and by whose rule; null when it
 * is not. Once per idle episode; not while snoozed; never for a judgment
 * other than `idle`. With the cull on, the admin's thresholds make it due
 * whatever the user's own settings say: the cull never comes unannounced.
 */
export function noticeDue(
  kernel: IGpuKernel,
  settings: IIdleNoticeSettings,
  policy: ICullPolicy,
  memory: INoticeMemory,
  now: number
): NoticeReason | null {
  const idle = kernel.idle;
  if (!idle || idle.state !== 'idle') {
    return null;
  }
  const id = kernel.kernel_id;
  if (memory.noticed[id] === idle.episode || (memory.snoozed[id] ?? 0) > now) {
    return null;
  }
  if (
    settings.enabled &&
    !memory.dontAsk.includes(kernel.path) &&
    isIdleHolder(kernel, userThresholds(settings))
  ) {
    return 'user';
  }
  if (policy.on && isIdleHolder(kernel, cullThresholds(policy))) {
    return 'cull';
  }
  return null;
}

function baseName(path: string): string {
  return path.split('/').pop() || path;
}

/**
 * The time of day the cull may act, as the user's clock shows it; with
 * seconds when the grace is short enough for them to matter.
 */
export function deadlineWords(cullAtMs: number, graceMinutes: number): string {
  return new Date(cullAtMs).toLocaleTimeString([], {
    hour: '2-digit',
    minute: '2-digit',
    ...(graceMinutes < 10 ? { second: '2-digit' } : {})
  });
}

/** `name` cut in its middle to at most `max` characters. */
function shortened(name: string, max: number): string {
  if (name.length <= max) {
    return name;
  }
  const keep = Math.max(1, max - 1);
  const tail = Math.ceil(keep / 2);
  return `${name.slice(0, keep - tail)}…${name.slice(name.length - tail)}`;
}

/**
 * The notice in one line, within JupyterLab's cut of NOTICE_MAX_CHARS:
 * `Untitled3.ipynb holds 38.0 GiB on GPU 1 and has done no GPU work for 42
 * min.` With the cull on, the deadline comes first, so no cut can hide it
 * (`cullAtMs`: when the server said the cull may act; null: not yet said,
 * a whole grace from now), and a long GPU list or notebook name is
 * shortened instead: `Shut down at 14:05 if it stays idle: …`.
 */
export function noticeMessage(
  kernel: IGpuKernel,
  policy: ICullPolicy,
  cullAtMs: number | null = null,
  now: number = Date.now(),
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const idle = kernel.idle;
  const held = formatMemory(idle?.held_bytes ?? kernel.memory_bytes, trans);
  const gpuList = idle?.gpus.length ? idle.gpus : kernel.devices;
  const age = formatAge((idle?.idle_s ?? 0) * 1000, trans);
  const name = baseName(kernel.path);
  if (!policy.on || policy.afterNoticeMinutes === null) {
    return trans.__(
      '%1 holds %2 on %3 and has done no GPU work for %4.',
      name,
      held,
      gpuList.join(trans.__(', ')),
      age
    );
  }
  const grace = policy.afterNoticeMinutes;
  const deadline = deadlineWords(cullAtMs ?? now + grace * 60_000, grace);
  const words = (notebook: string, gpus: string): string =>
    trans.__(
      'Shut down at %1 if it stays idle: %2 holds %3 on %4, no GPU work for %5.',
      deadline,
      notebook,
      held,
      gpus,
      age
    );
  let gpus = gpuList.join(trans.__(', '));
  if (words(name, gpus).length > NOTICE_MAX_CHARS && gpuList.length > 1) {
    gpus = trans.__('%1 GPUs', gpuList.length);
  }
  const room = NOTICE_MAX_CHARS - words('', gpus).length;
  return words(shortened(name, room), gpus);
}

/** What the user is told after the cull shut a kernel down, and why. */
export function cullMessage(
  cull: ICullRecord,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  return trans.__(
    'GPU idle cull shut down the kernel of %1: %2 on %3, no GPU work for %4, told %5 before.',
    baseName(cull.path),
    formatMemory(cull.held_bytes, trans),
    cull.gpus.join(trans.__(', ')),
    formatAge((cull.idle_s ?? 0) * 1000, trans),
    formatAge(cull.told_s_ago * 1000, trans)
  );
}
