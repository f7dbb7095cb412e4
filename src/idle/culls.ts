/**
 * The admin's GPU idle cull as the server describes it
 * (`GET nvdashboard-idle/culls`): its policy, the warnings it holds armed and
 * the culls it did, validated once here; and its thresholds in the idle
 * rule's terms.
 */
import { GIB, numberOrNull } from '../shared/format';
import { IIdleThresholds } from '../glance/idleRule';
import { isString, texts } from './noticeMemory';

/** How often the cull's list is read while the server has not said (s). */
export const CULLS_INTERVAL_S = 10;

/** The admin's cull, as `GET nvdashboard-idle/culls` describes it. */
export interface ICullPolicy {
  on: boolean;
  /** Minutes between the notice and the cull; null when off. */
  afterNoticeMinutes: number | null;
  idleMinutes: number;
  minHeldBytes: number;
  /** How often the warnings on screen are reported (s). */
  reportEveryS: number;
  /** How long "Keep this kernel" holds the cull off (minutes). */
  keepMinutes: number;
}

export const CULL_OFF: ICullPolicy = {
  on: false,
  afterNoticeMinutes: null,
  idleMinutes: 30,
  minHeldBytes: GIB,
  reportEveryS: CULLS_INTERVAL_S,
  keepMinutes: 30
};

/** A warning the cull holds armed (`GET nvdashboard-idle/culls`'s `warnings`). */
export interface IArmedWarning {
  kernel_id: string;
  episode: string;
  /** When the cull may act (epoch s). */
  cull_at: number;
}

/** A kernel the cull shut down, with the figures it was judged on. */
export interface ICullRecord {
  /** `<at>:<kernel id>`: the same cull is told once. */
  key: string;
  kernel_id: string;
  path: string;
  held_bytes: number;
  gpus: string[];
  idle_s: number | null;
  told_s_ago: number;
}

/** The admin's thresholds in bytes and seconds. */
export function cullThresholds(policy: ICullPolicy): IIdleThresholds {
  return {
    minBytes: policy.minHeldBytes,
    idleSeconds: policy.idleMinutes * 60
  };
}

/** `GET nvdashboard-idle/culls`'s body: the policy and the culls done. */
export function parseCulls(body: unknown): {
  policy: ICullPolicy;
  warnings: IArmedWarning[];
  culls: ICullRecord[];
} {
  const data = (body ?? {}) as Record<string, unknown>;
  const p = (data.policy ?? {}) as Record<string, unknown>;
  const after = numberOrNull(p.after_notice_minutes);
  const policy: ICullPolicy =
    p.on === true && after !== null && after > 0
      ? {
          on: true,
          afterNoticeMinutes: after,
          idleMinutes: numberOrNull(p.idle_minutes) ?? CULL_OFF.idleMinutes,
          minHeldBytes: numberOrNull(p.min_held_bytes) ?? CULL_OFF.minHeldBytes,
          reportEveryS:
            positive(numberOrNull(p.report_every_s)) ?? CULL_OFF.reportEveryS,
          keepMinutes:
            positive(numberOrNull(p.keep_minutes)) ?? CULL_OFF.keepMinutes
        }
      : CULL_OFF;
  const warnings: IArmedWarning[] = [];
  for (const item of Array.isArray(data.warnings) ? data.warnings : []) {
    const w = (item ?? {}) as Record<string, unknown>;
    const at = numberOrNull(w.cull_at);
    if (isString(w.kernel_id) && isString(w.episode) && at !== null) {
      warnings.push({
        kernel_id: w.kernel_id,
        episode: w.episode,
        cull_at: at
      });
    }
  }
  const culls: ICullRecord[] = [];
  for (const item of Array.isArray(data.culls) ? data.culls : []) {
    const c = (item ?? {}) as Record<string, unknown>;
    const at = numberOrNull(c.at);
    if (typeof c.kernel_id !== 'string' || at === null) {
      continue;
    }
    culls.push({
      key: `${at}:${c.kernel_id}`,
      kernel_id: c.kernel_id,
      path: typeof c.path === 'string' ? c.path : '',
      held_bytes: numberOrNull(c.held_bytes) ?? 0,
      gpus: texts(c.gpus),
      idle_s: numberOrNull(c.idle_s),
      told_s_ago: numberOrNull(c.told_s_ago) ?? 0
    });
  }
  return { policy, warnings, culls };
}

function positive(value: number | null): number | null {
  return value !== null && value > 0 ? value : null;
}
