/**
 * How often the idle notice needs the glance read: its thresholds are
 * minutes, so it asks far less often than the views that show the glance,
 * and never more often than a tenth of its shortest threshold needs.
 */
import { IIdleNoticeSettings } from '../glance/idleRule';
import { ICullPolicy } from './culls';

/**
 * The longest wait between readings of the glance for the notice alone
 * (ms). Its thresholds are minutes (idle 30 min by default), so a notice a
 * minute late changes nothing, while a poll every 2 s that no view shows
 * costs a request each time and keeps the dashboard server from its idle
 * exit. The status item and the open sidebar still read at the refresh rate.
 */
export const NOTICE_INTERVAL_MS = 60_000;

/**
 * A shorter threshold is read at this fraction of itself, so a notice comes
 * at most a tenth of its threshold late (5 min idle: every 30 s). Thresholds
 * of seconds (tests, or an impatient user) are read at the refresh rate,
 * which the glance poll never goes below.
 */
export const NOTICE_LATENESS = 0.1;

/**
 * How often the notice needs the glance read (ms): a fraction of its
 * shortest threshold in force (the user's idle time while notices are on,
 * the snooze, and the admin's cull idle time while the cull is on), at
 * most NOTICE_INTERVAL_MS.
 */
export function noticeInterval(
  settings: IIdleNoticeSettings,
  policy: ICullPolicy
): number {
  const minutes = [settings.snoozeMinutes];
  if (settings.enabled) {
    minutes.push(settings.idleMinutes);
  }
  if (policy.on) {
    minutes.push(policy.idleMinutes);
  }
  return Math.min(
    NOTICE_INTERVAL_MS,
    NOTICE_LATENESS * Math.min(...minutes) * 60_000
  );
}
