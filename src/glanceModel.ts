/**
 * The one poll of `{base}nvdashboard/glance.json`, shared by the status-bar
 * item and the sidebar's live section.
 *
 * It polls only while one of them uses it (the status item while enabled,
 * the sidebar section while shown, the idle notice while on) and JupyterLab
 * is visible, as often as the most demanding of them needs: the views at the
 * refresh rate, the idle notice alone far less often. It compares
 * each answer with the last and emits only on a change, or on a failure,
 * whose age the views show. An answer with no device (a machine without a
 * GPU) and a failure that will not heal (404, a bad body) make it wait
 * twice as long each time; a server on its way up or gone (a gateway error,
 * no answer) is asked again at the interval, then three times as long each
 * time up to `GLANCE_RETRY_MAX_MS`: through the proxy, each request may
 * launch the dashboard server again.
 */
import { JSONExt, JSONObject } from '@lumino/coreutils';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  GLANCE_INTERVAL_MS,
  IGlance,
  IGlanceState,
  parseGlance
} from './glance';
import { errorMessage, isStartingError } from './model';
import { PollOutcome, Poller } from './poller';

/** The longest wait between retries of a server that is down or starting. */
export const GLANCE_RETRY_MAX_MS = 30 * 1000;

export namespace GlanceModel {
  export interface IOptions {
    /** Resolve with `glance.json`'s parsed body. */
    fetch: () => Promise<unknown>;
    /**
     * Milliseconds between polls, and between retries after a failure, for
     * a user that names no interval (the views); the shortest wait.
     */
    interval?: number;
    /** The longest wait between retries (default GLANCE_RETRY_MAX_MS). */
    retryMax?: number;
    /** The longest wait after answers that will not heal. */
    stuckMax?: number;
    /** When the poll pauses; by default while the page is hidden. */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
    /** The clock (tests). */
    now?: () => number;
    /** Poll by itself while used (default); false: only `refresh()` asks (tests). */
    autoStart?: boolean;
  }
}

export class GlanceModel {
  constructor(options: GlanceModel.IOptions) {
    this._fetch = options.fetch;
    this._now = options.now ?? Date.now;
    this._poller = new Poller({
      name: 'nvdashboard:glance',
      request: () => this._request(),
      interval: options.interval ?? GLANCE_INTERVAL_MS,
      retryMax: options.retryMax ?? GLANCE_RETRY_MAX_MS,
      stuckMax: options.stuckMax,
      standby: options.standby,
      autoStart: options.autoStart
    });
  }

  /** The last good reading, or null. */
  get glance(): IGlance | null {
    return this._state.glance;
  }

  /** The last reading and whether the last poll failed. */
  get state(): IGlanceState {
    return this._state;
  }

  /** Whether the last poll failed. */
  get stale(): boolean {
    return this._state.error !== null;
  }

  /** Whether the last poll brought a reading (what the views show is live). */
  get live(): boolean {
    return this._state.glance !== null && this._state.error === null;
  }

  /** Whether the last answer will not heal by itself (404, no GPU). */
  get stuck(): boolean {
    return this._stuck;
  }

  /** Emitted when what the views show changed. */
  get changed(): ISignal<this, IGlanceState> {
    return this._changed;
  }

  /** The poll (tests). */
  get poller(): Poller {
    return this._poller;
  }

  /** The clock the views measure the age of a reading with. */
  now(): number {
    return this._now();
  }

  /**
   * Milliseconds between polls for the views (the refresh rate), and the
   * shortest wait; a change applies at once.
   */
  get interval(): number {
    return this._poller.interval;
  }

  set interval(value: number) {
    this._poller.interval = value;
  }

  /** Milliseconds between polls now: what the most demanding user needs. */
  get currentInterval(): number {
    return this._poller.currentInterval;
  }

  /**
   * Say whether `user` shows what this reads, and how often it needs a
   * reading (ms; by default `interval`); it polls while one does.
   */
  use(user: unknown, inUse: boolean, intervalMs?: number): void {
    this._poller.use(user, inUse, intervalMs);
  }

  /**
   * Fetch now, resolving with how it went. One request is in flight at a
   * time, and what it resolves with was asked for after the call.
   */
  refresh(): Promise<PollOutcome> {
    return this._poller.refresh();
  }

  dispose(): void {
    this._poller.dispose();
    Signal.clearData(this);
  }

  private async _request(): Promise<PollOutcome> {
    let glance: IGlance;
    try {
      glance = parseGlance(await this._fetch());
    } catch (error) {
      const outcome = isStartingError(error) ? 'retry' : 'stuck';
      this._apply(null, errorMessage(error), outcome);
      return outcome;
    }
    // No device: still being read (asked again at the interval: the server
    // answers, so there is nothing to back off from), or no GPU here (that
    // will not change).
    const outcome: PollOutcome =
      glance.devices.length || glance.reading_gpus ? 'ok' : 'stuck';
    this._apply(glance, null, outcome);
    return outcome;
  }

  private _apply(
    glance: IGlance | null,
    error: string | null,
    outcome: PollOutcome
  ): void {
    const previous = this._state;
    const wasStuck = this._stuck;
    this._stuck = outcome === 'stuck';
    const now = this._now();
    if (glance) {
      const same =
        wasStuck === this._stuck &&
        previous.error === null &&
        previous.glance !== null &&
        JSONExt.deepEqual(
          previous.glance as unknown as JSONObject,
          glance as unknown as JSONObject
        );
      // The time is kept either way, so a stale state counts from the last answer.
      this._state = { glance, readAt: now, error: null, failedAt: null };
      if (same) {
        return;
      }
    } else {
      // A failure always changes what is shown: the age of the last reading.
      this._state = { ...previous, error, failedAt: now };
    }
    this._changed.emit(this._state);
  }

  private _fetch: () => Promise<unknown>;
  private _now: () => number;
  private _poller: Poller;
  private _stuck = false;
  private _state: IGlanceState = {
    glance: null,
    readAt: null,
    error: null,
    failedAt: null
  };
  private _changed = new Signal<this, IGlanceState>(this);
}
