/**
 * The one retry rule: after failures in a row, each wait is `growth` times
 * the one before, starting at `first`, never past `max`. Its users:
 *
 * - the poller's retries of a server on its way up (three times as long
 *   each time, up to the poll's `retryMax`);
 * - the poller's waits after answers that will not heal (twice as long each
 *   time, up to `stuckMax`): the glance poll, the dashboard list and the
 *   cull's poll all wait by it;
 * - the glance socket's reconnects after a socket that brought nothing
 *   (twice the poll interval, then twice as long each time, up to
 *   STUCK_MAX_MS).
 */

/** How waits grow over failures in a row. */
export interface IBackoff {
  /** The wait after the first failure (ms). */
  first: number;
  /** How many times longer each wait is than the one before. */
  growth: number;
  /** The longest wait (ms). */
  max: number;
}

/** The wait after `failures` failures in a row (at least 1). */
export function backoffWait(rule: IBackoff, failures: number): number {
  return Math.min(rule.max, rule.first * rule.growth ** (failures - 1));
}

/**
 * A run of failures in a row, for a caller whose first wait is set when the
 * run starts and kept while it lasts (the poller's).
 */
export class FailureRun {
  constructor(readonly growth: number) {}

  /** One more failure; `first()` gives the first wait when a run starts. */
  fail(first: () => number): void {
    if (this._failures === 0) {
      this._first = first();
    }
    this._failures++;
  }

  /** A success ends the run. */
  reset(): void {
    this._failures = 0;
    this._first = 0;
  }

  /** The wait the run has grown to, uncapped (ms); 0 with no failure. */
  get wait(): number {
    return this._failures === 0
      ? 0
      : backoffWait(
          { first: this._first, growth: this.growth, max: Infinity },
          this._failures
        );
  }

  private _failures = 0;
  private _first = 0;
}
