/**
 * The one reading of the glance, shared by the status-bar item, the
 * sidebar's live section, the notebook toolbar, the notices and the live
 * cell footers: a poll
 * of `{base}nvdashboard/glance.json`, and, once that has answered, the
 * server's `glance/stream` socket, which sends the glance only when its
 * content changes (`stream/changes.py`: one small message through the
 * proxy, where each poll was a whole request).
 *
 * Once the socket has brought a glance, the poll stands by; when the socket
 * closes or falls silent, the poll asks at once and carries on with its
 * retry and backoff until an answer lets the socket open again. A socket
 * that closes before its first message (a server without the route, a
 * proxy that does not pass websockets) is tried again only after a wait
 * twice as long each time, up to `STUCK_MAX_MS`; the poll carries on
 * meanwhile. A `refresh()` (after
 * a kernel was shut down) is still a request of its own, so its answer was
 * read after the call. The socket is closed while JupyterLab is hidden and
 * while nothing uses the model; when it is shown again, the poll asks at
 * once (a fresh answer) and opens it again.
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
 *
 * It is read by the live cell footers too (a cell running in a shown
 * notebook asks for it each second) and by the running-cell notice.
 *
 * Over 400 lines: the poll and the socket are one state machine (which one
 * brings the glance, and when the other takes over); split, each half would
 * have to read the other's state.
 */
import { JSONExt, JSONObject } from '@lumino/coreutils';
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  GLANCE_INTERVAL_MS,
  IGlance,
  IGlanceState,
  parseGlance
} from './glance';
import { errorMessage, isStartingError } from '../shared/errors';
import { backoffWait } from '../shared/backoff';
import { IGlanceStreamHandlers } from '../shared/fetcher';
import { PollOutcome, Poller, STUCK_MAX_MS } from '../shared/poller';

/** The longest wait between retries of a server that is down or starting. */
export const GLANCE_RETRY_MAX_MS = 30 * 1000;

/**
 * How long past its interval the socket may stay silent before it counts as
 * hung (closed, and the poll asks): the server sends something at each tick
 * (a glance, or a heartbeat), so a hung server reads as stale about as soon
 * as a poll's timeout said so.
 */
export const GLANCE_STREAM_SILENCE_MS = 1000;

/**
 * Open the glance socket, asking for a message at most every `intervalMs`;
 * `close()` on what it returns closes it without calling `closed`.
 */
export type GlanceStreamConnect = (
  intervalMs: number,
  handlers: IGlanceStreamHandlers
) => { close: () => void };

export namespace GlanceModel {
  export interface IOptions {
    /** Resolve with `glance.json`'s parsed body. */
    fetch: () => Promise<unknown>;
    /** Open the glance socket; without it, the model only polls. */
    connect?: GlanceStreamConnect;
    /** Milliseconds of silence after which the socket counts as hung. */
    silenceMs?: number;
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

export class GlanceModel implements IDisposable {
  constructor(options: GlanceModel.IOptions) {
    this._fetch = options.fetch;
    this._connect = options.connect ?? null;
    this._silenceMs = options.silenceMs ?? GLANCE_STREAM_SILENCE_MS;
    this._now = options.now ?? Date.now;
    const standby = options.standby ?? 'when-hidden';
    this._poller = new Poller({
      name: 'nvdashboard:glance',
      request: () => this._request(),
      interval: options.interval ?? GLANCE_INTERVAL_MS,
      retryMax: options.retryMax ?? GLANCE_RETRY_MAX_MS,
      stuckMax: options.stuckMax,
      // The poll stands by while the socket brings the glance, and while the
      // page is hidden from the first hidden tick (Lumino's 'when-hidden'
      // asks once more).
      standby: () => {
        if (this._streamLive) {
          return true;
        }
        const own = typeof standby === 'function' ? standby() : standby;
        return own === 'when-hidden' ? pageHidden() : own;
      },
      autoStart: options.autoStart
    });
    if (this._connect && typeof document !== 'undefined') {
      document.addEventListener('visibilitychange', this._onVisibility);
    }
  }

  /** Whether the glance socket brings the glance (the poll stands by). */
  get streaming(): boolean {
    return this._streamLive;
  }

  get isDisposed(): boolean {
    return this._poller.isDisposed;
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
    if (!this._stream) {
      return;
    }
    // Nobody left: closed. Another pace: opened again at that pace.
    if (!this._poller.running) {
      this._closeStream();
    } else if (this._streamInterval !== this._poller.currentInterval) {
      this._closeStream();
      this._openStream();
    }
  }

  /**
   * Milliseconds between polls for the views (the refresh rate), and the
   * shortest wait; a change applies at once, to the socket too.
   */
  get interval(): number {
    return this._poller.interval;
  }

  set interval(value: number) {
    this._poller.interval = value;
    if (this._stream && this._streamInterval !== this._poller.currentInterval) {
      this._closeStream();
      this._openStream();
    }
  }

  /**
   * Fetch now, resolving with how it went. One request is in flight at a
   * time, and what it resolves with was asked for after the call.
   */
  refresh(): Promise<PollOutcome> {
    return this._poller.refresh();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._closeStream();
    if (this._connect && typeof document !== 'undefined') {
      document.removeEventListener('visibilitychange', this._onVisibility);
    }
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
    const outcome = glanceOutcome(glance);
    this._apply(glance, null, outcome);
    if (
      outcome === 'ok' &&
      !this._stream &&
      this._now() >= this._streamRetryAt
    ) {
      this._openStream();
    }
    return outcome;
  }

  /** Whether the socket should be open: something uses the glance, and it shows. */
  private _wantsStream(): boolean {
    return this._connect !== null && this._poller.running && !pageHidden();
  }

  private _openStream(): void {
    if (!this._connect || !this._wantsStream()) {
      return;
    }
    const interval = this._poller.currentInterval;
    let stream: { close: () => void } | null = null;
    const mine = (): boolean => stream !== null && this._stream === stream;
    try {
      stream = this._connect(interval, {
        message: body => {
          if (mine()) {
            this._onMessage(body);
          }
        },
        alive: () => {
          if (mine() && this._streamLive) {
            this._watchSilence();
          }
        },
        closed: () => {
          if (mine()) {
            this._streamEnded();
          }
        }
      });
    } catch {
      // A socket the browser refuses to open (a bad URL) fails as one that closed.
      this._streamFailed();
      return;
    }
    this._stream = stream;
    this._streamInterval = interval;
    this._watchSilence();
  }

  private _onMessage(body: unknown): void {
    this._streamLive = true;
    this._streamFailures = 0;
    const glance = parseGlance(body);
    const outcome = glanceOutcome(glance);
    this._apply(glance, null, outcome);
    if (outcome === 'ok') {
      this._watchSilence();
    } else {
      // No device any more: the poll judges how long to wait.
      this._closeStream();
      this._poller.askNow();
    }
  }

  /**
   * The socket closed by itself, or went silent. One that brought glances:
   * the poll asks now. One that never did: tried again after a longer wait.
   */
  private _streamEnded(): void {
    const wasLive = this._streamLive;
    this._closeStream();
    if (wasLive) {
      this._poller.askNow();
    } else {
      this._streamFailed();
    }
  }

  /** A socket that brought nothing: the next one only after a longer wait. */
  private _streamFailed(): void {
    this._streamFailures++;
    // Twice the poll interval, then twice as long each time: the retry rule's.
    this._streamRetryAt =
      this._now() +
      backoffWait(
        {
          first: 2 * this._poller.currentInterval,
          growth: 2,
          max: STUCK_MAX_MS
        },
        this._streamFailures
      );
  }

  private _watchSilence(): void {
    clearTimeout(this._silence);
    this._silence = setTimeout(
      () => this._streamEnded(),
      this._silenceMs + this._streamInterval
    );
  }

  private _closeStream(): void {
    clearTimeout(this._silence);
    const stream = this._stream;
    this._stream = null;
    this._streamLive = false;
    stream?.close();
  }

  /** Hidden: the socket closes. Shown: the poll asks at once, and opens it. */
  private _onVisibility = (): void => {
    if (pageHidden()) {
      this._closeStream();
    } else if (this._poller.running && !this._stream) {
      this._poller.askNow();
    }
  };

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
  private _connect: GlanceStreamConnect | null;
  private _silenceMs: number;
  private _stream: { close: () => void } | null = null;
  private _streamLive = false;
  private _streamInterval = 0;
  private _streamFailures = 0;
  private _streamRetryAt = -Infinity;
  private _silence: ReturnType<typeof setTimeout> | undefined = undefined;
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

/**
 * How a reading went: no device means still being read (asked again at the
 * interval: the server answers, so there is nothing to back off from), or no
 * GPU here (that will not change).
 */
function glanceOutcome(glance: IGlance): PollOutcome {
  return glance.devices.length || glance.reading_gpus ? 'ok' : 'stuck';
}

/** Whether JupyterLab's page is hidden (another browser tab, minimized). */
function pageHidden(): boolean {
  return (
    typeof document !== 'undefined' && document.visibilityState === 'hidden'
  );
}
