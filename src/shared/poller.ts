/**
 * The one poll wrapper: the glance model and the dashboard list both poll
 * through it.
 *
 * - One request is in flight at a time, and `refresh()` resolves with an
 *   answer asked for after the call (say, after a kernel was shut down).
 * - Each answer says how it went, and that sets the wait before the next:
 *   `ok` (the normal interval), `retry` (a failure that heals by itself, such
 *   as a server on its way up: soon, then less often, up to `retryMax`) or `stuck` (one that will not, such as a
 *   404 or a machine with no GPU: the wait grows, up to `stuckMax`).
 * - It polls only while something uses it (`use(user, true)`): a poll that
 *   nothing reads costs the dashboard server its idle exit.
 * - Each user may say how often it needs an answer (`use(user, true, ms)`);
 *   it polls as often as the most demanding user needs, never more often
 *   than `interval` (the rate the user chose), so a user that needs an
 *   answer once a minute does not make it ask every 2 s.
 */
import { IDisposable } from '@lumino/disposable';
import { IPoll, Poll } from '@lumino/polling';

import { FailureRun } from './backoff';

/** How an answer went, which sets the wait before the next poll. */
export type PollOutcome = 'ok' | 'retry' | 'stuck';

/** The longest wait after answers that will not heal (a 404, no GPU). */
export const STUCK_MAX_MS = 5 * 60 * 1000;

/** How much longer each wait between retries is than the one before. */
const RETRY_GROWTH = 3;

/** How much longer each wait after a `stuck` answer is than the one before. */
const STUCK_GROWTH = 2;

export namespace Poller {
  export interface IOptions {
    /** The poll's name (Lumino's, for debugging). */
    name: string;
    /** One request; resolves with how it went (a rejection counts as `stuck`). */
    request: () => Promise<PollOutcome>;
    /**
     * Milliseconds between polls after an `ok` answer, for a user that names
     * no interval of its own; no user makes it poll more often.
     */
    interval: number;
    /** The first wait after a `retry` answer (default: `interval`). */
    retryInterval?: number;
    /** The longest wait between retries (default: `retryInterval`: no growth). */
    retryMax?: number;
    /** The longest wait after `stuck` answers (default STUCK_MAX_MS). */
    stuckMax?: number;
    /** When the poll pauses; by default while the page is hidden. */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
    /** Poll by itself while used (default); false: only `refresh()` asks (tests). */
    autoStart?: boolean;
  }
}

export class Poller implements IDisposable {
  constructor(options: Poller.IOptions) {
    this._request = options.request;
    this._interval = options.interval;
    this._retryInterval = options.retryInterval;
    this._retryMax = options.retryMax;
    this._stuckMax = options.stuckMax ?? STUCK_MAX_MS;
    this._autoStart = options.autoStart ?? true;
    this._poll = new Poll({
      auto: false,
      factory: () => this._tick(),
      frequency: this.frequency('ok'),
      name: options.name,
      standby: options.standby ?? 'when-hidden'
    });
  }

  /** The Lumino poll underneath (tests). */
  get poll(): Poll {
    return this._poll;
  }

  /** How the last answer went; null before the first. */
  get outcome(): PollOutcome | null {
    return this._outcome;
  }

  /** Whether it is polling (something uses it). */
  get running(): boolean {
    return this._users.size > 0 && !this._poll.isDisposed;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /**
   * The shortest wait between polls after an `ok` answer (the rate the user
   * chose), and the wait for a user that names none; a change applies at once.
   */
  get interval(): number {
    return this._interval;
  }

  set interval(value: number) {
    if (!(value > 0) || value === this._interval) {
      return;
    }
    const before = this.currentInterval;
    this._interval = value;
    this._retime(before);
  }

  /**
   * The wait between polls after an `ok` answer now: the shortest any
   * current user needs, but not below `interval`.
   */
  get currentInterval(): number {
    let wanted = Infinity;
    for (const needed of this._users.values()) {
      wanted = Math.min(wanted, needed ?? this._interval);
    }
    return Number.isFinite(wanted)
      ? Math.max(this._interval, wanted)
      : this._interval;
  }

  /**
   * The wait after an answer: `ok` at the interval; `retry` from the retry
   * interval, three times as long each time, up to the retry maximum;
   * `stuck` the interval, then twice as long each time, up to the stuck
   * maximum. The poller sets every wait itself, so `interval` is the wait.
   */
  frequency(outcome: PollOutcome): IPoll.Frequency {
    const interval = this.currentInterval;
    if (outcome === 'ok') {
      return { interval, backoff: false, max: interval };
    }
    if (outcome === 'retry') {
      const retry = Math.min(this._retryInterval ?? interval, interval);
      const max = Math.max(retry, this._retryMax ?? retry);
      return {
        interval: Math.min(max, Math.max(retry, this._retries.wait)),
        backoff: false,
        max
      };
    }
    const max = Math.max(interval, this._stuckMax);
    return {
      interval: Math.min(max, Math.max(interval, this._stucks.wait)),
      backoff: false,
      max
    };
  }

  /**
   * Say whether `user` reads what this polls, and how often it needs an
   * answer (milliseconds; by default `interval`). It polls while at least one
   * user does, as often as the most demanding one needs; the first one
   * starts it at once, and one that needs it more often than it polls now
   * gets an answer at once.
   */
  use(user: unknown, inUse: boolean, intervalMs?: number): void {
    if (this.isDisposed) {
      return;
    }
    const wasRunning = this.running;
    const before = this.currentInterval;
    if (inUse) {
      this._users.set(
        user,
        intervalMs !== undefined && intervalMs > 0 ? intervalMs : undefined
      );
    } else {
      this._users.delete(user);
    }
    if (this.running === wasRunning || !this._autoStart) {
      this._retime(before);
      return;
    }
    this._poll.frequency = this.frequency(this._outcome ?? 'ok');
    if (this.running) {
      void this._poll.start();
    } else {
      void this._poll.stop();
    }
  }

  /**
   * Ask now; resolves with how it went. One request is in flight at a time:
   * a call while one is out waits for it and then asks again, so what it
   * resolves with was asked for after the call.
   */
  refresh(): Promise<PollOutcome> {
    if (!this._inFlight) {
      return this._send();
    }
    if (!this._queued) {
      this._queued = this._inFlight.then(() => {
        this._queued = null;
        return this._send();
      });
    }
    return this._queued;
  }

  /**
   * Have the poll ask at once, where it runs (something uses it), as if its
   * wait had ended: what the answer says sets the waits after it.
   */
  askNow(): void {
    const phase = this._poll.state.phase;
    if (this.running && phase !== 'constructed' && phase !== 'stopped') {
      void this._poll.refresh();
    }
  }

  dispose(): void {
    this._users.clear();
    this._poll.dispose();
  }

  /**
   * Apply a change of `currentInterval` from `before`. A wait already set
   * runs to the old pace: when the new one is faster (the sidebar opened
   * while only the idle notice read the glance), ask now; when it is slower,
   * that wait stands and the next follows the new pace.
   */
  private _retime(before: number): void {
    const now = this.currentInterval;
    if (now === before) {
      return;
    }
    this._poll.frequency = this.frequency(this._outcome ?? 'ok');
    const phase = this._poll.state.phase;
    if (
      now < before &&
      this.running &&
      phase !== 'constructed' &&
      phase !== 'stopped'
    ) {
      void this._poll.refresh();
    }
  }

  private _send(): Promise<PollOutcome> {
    const run = Promise.resolve()
      .then(() => this._request())
      .catch((): PollOutcome => 'stuck')
      .then(outcome => {
        this._outcome = outcome;
        if (this._inFlight === run) {
          this._inFlight = null;
        }
        return outcome;
      });
    this._inFlight = run;
    return run;
  }

  /**
   * A tick. Every answer resolves, with the wait this poller chose for it:
   * Lumino's own retry wait (after a rejection) is drawn at random between
   * the interval and the previous tick's wait, and after a tick that ran at
   * once (a start, a refresh) that range reaches down to 1 ms; a run of
   * unlucky draws then asked dozens of times a second of a failing server.
   */
  private async _tick(): Promise<void> {
    const outcome = await this.refresh();
    if (this.isDisposed) {
      return;
    }
    // The first wait of a run is fixed when it starts (the backoff rule's).
    if (outcome === 'retry') {
      this._retries.fail(() => this.frequency('retry').interval);
    } else {
      this._retries.reset();
    }
    if (outcome === 'stuck') {
      this._stucks.fail(() => this.currentInterval);
    } else {
      this._stucks.reset();
    }
    this._poll.frequency = this.frequency(outcome);
  }

  private _request: () => Promise<PollOutcome>;
  private _interval: number;
  private _retryInterval: number | undefined;
  private _retryMax: number | undefined;
  private _stuckMax: number;
  private _autoStart: boolean;
  private _poll: Poll;
  /** Each user, and the interval it needs (undefined: `interval`). */
  private _users = new Map<unknown, number | undefined>();
  private _outcome: PollOutcome | null = null;
  private _stucks = new FailureRun(STUCK_GROWTH);
  private _retries = new FailureRun(RETRY_GROWTH);
  private _inFlight: Promise<PollOutcome> | null = null;
  private _queued: Promise<PollOutcome> | null = null;
}
