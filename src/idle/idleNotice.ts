/**
 * The idle-kernel notice: when one of the user's kernels holds GPU memory
 * and has done no GPU work for a while, JupyterLab's notification says so,
 * with its figures, and offers Shut down kernel, Open notebook, Not now
 * (snooze) and Don't ask for this notebook (with the cull on: Shut down
 * kernel, Open notebook and Keep this kernel).
 *
 * - Once per idle episode (the server's `idle.episode`: a new one starts
 *   when the kernel runs a cell or uses the GPU again). "Not now" is quiet
 *   for the snooze time, then the notice comes once more.
 * - What was shown, snoozed or declined is kept in JupyterLab's state
 *   database, so a reload neither repeats a notice nor forgets "Don't ask".
 * - Only the user's own kernels (the server lists no other user's) that
 *   this Jupyter server runs (only those can be shut down from here), only
 *   when the judgment is `idle`: never for `busy` or `cannot_tell`.
 * - When the admin's GPU idle cull is on (jupyter_extension.py), the
 *   notice is the warning the cull waits for: it is then shown whatever the
 *   user's own settings say, with the admin's thresholds, and says first
 *   when the kernel may be shut down; a cull that happened is told as well.
 *   The server then judges the warning's life (idle_cull.py): a warning is
 *   on screen exactly while the server lists it armed, so a reading that
 *   misses the kernel never takes it away while the cull stays armed, and
 *   one the server armed comes back after a reload. Each read of the culls
 *   reports the warnings on screen: the cull acts only on a warning that
 *   was on screen for its whole grace.
 *
 * The words and the rules are pure functions in their own modules (the idle
 * rule in glance/idleRule.ts, the notice's words in noticeWords.ts, the
 * culls API in culls.ts, the memory in noticeMemory.ts, how often it reads
 * the glance in noticePace.ts); `IdleNotifier` connects them to the glance
 * poll, the notification manager and the state database. It is over 400 lines because it is one object with one job,
 * the notice's life on screen (shown, snoozed, kept, taken away, reported
 * to the cull): cut in two, each half would reach into the other's state.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { JSONExt, JSONObject } from '@lumino/coreutils';
import { ISignal } from '@lumino/signaling';

import { IGlance, IGpuKernel } from '../glance/glance';
import { GlanceModel } from '../glance/glanceModel';
import {
  DEFAULT_NOTICE_SETTINGS,
  IIdleNoticeSettings
} from '../glance/idleRule';
import { formatAge, NULL_BUNDLE } from '../shared/format';
import { Poller } from '../shared/poller';
import { noticeInterval } from './noticePace';
import {
  CULL_OFF,
  CULLS_INTERVAL_S,
  IArmedWarning,
  ICullPolicy,
  parseCulls
} from './culls';
import {
  emptyMemory,
  INoticeMemory,
  INoticeStore,
  lastEntries,
  MEMORY_BOUND,
  NOTICE_STATE_ID,
  parseMemory
} from './noticeMemory';
import {
  cullMessage,
  deadlineWords,
  noticeDue,
  noticeMessage,
  NoticeReason
} from './noticeWords';

/** A notice on screen: its notification's id and the idle episode it is about. */
export interface IShownNotice {
  notification: string;
  episode: string;
  /** The cull's warning (the cull was on): the server judges its life. */
  warning: boolean;
  /**
   * The reads of the culls asked for before the server had this warning
   * (null: it never said it had): an answer to a later one lacking it means
   * the server ended its episode.
   */
  postedAsk: number | null;
  /** When the cull may act, as the message says (epoch ms; null: not said). */
  cullAtMs: number | null;
  /**
   * The read of the culls during which the message was last reworded (null:
   * said since): a report at a later read says it once more. JupyterLab drops
   * a `Notification.update` that comes before its toast is drawn (the toast
   * keeps its first words, and the update reports success), and on a loaded
   * machine a report's answer came first.
   */
  rewordedAsk: number | null;
  kernel: IGpuKernel;
  actions: INoticeAction[];
}

/** A notification's button (JupyterLab's `Notification.IAction`). */
export interface INoticeAction {
  label: string;
  caption?: string;
  displayType?: 'default' | 'accent' | 'warn' | 'link';
  callback: (event: MouseEvent) => void;
}

export namespace IdleNotifier {
  export interface IOptions {
    model: GlanceModel;
    /** Show a notification (JupyterLab's `Notification.emit`); returns its id. */
    notify: (
      message: string,
      type: 'info' | 'warning',
      actions: INoticeAction[]
    ) => string;
    /**
     * Say something else in a notification on screen, in place (JupyterLab's
     * `Notification.update`): it never leaves the screen meanwhile.
     */
    reword: (
      notificationId: string,
      message: string,
      type: 'info' | 'warning',
      actions: INoticeAction[]
    ) => void;
    /** Take a notification off the screen (JupyterLab's `Notification.dismiss`). */
    dismiss: (notificationId: string) => void;
    /** Shut the kernel down through JupyterLab's kernel API. */
    shutdownKernel: (kernelId: string) => Promise<void>;
    openPath: (path: string) => void;
    /** Whether this Jupyter server runs the kernel. */
    isLocalKernel: (kernelId: string) => boolean;
    /** Emitted when this server's kernels change. */
    localKernelsChanged?: ISignal<unknown, unknown>;
    /**
     * Tell the server the notice is on screen (the cull waits for it a whole
     * grace); resolves with when the cull may act (epoch s; null: never).
     */
    postNotice: (kernelId: string, episode: string) => Promise<number | null>;
    /** "Keep this kernel"; resolves with until when (epoch s; null: off). */
    postKeep: (kernelId: string) => Promise<number | null>;
    /** `GET nvdashboard-idle/culls`'s body. */
    fetchCulls: () => Promise<unknown>;
    store: INoticeStore;
    showError?: (title: string, error: unknown) => void;
    /** The clock (ms). */
    now?: () => number;
    /**
     * Milliseconds between reads of the cull's list while it is on (default:
     * as often as the server asks to hear of the warnings on screen).
     */
    cullsInterval?: number;
    /** Poll by itself (default); false: tests call `check()`/`readCulls()`. */
    autoStart?: boolean;
    trans?: TranslationBundle;
  }
}

/** Connects the rules above to the glance poll and JupyterLab (see the module comment). */
export class IdleNotifier {
  constructor(options: IdleNotifier.IOptions) {
    this._options = options;
    this._now = options.now ?? Date.now;
    this._trans = options.trans ?? NULL_BUNDLE;
    this._culls = new Poller({
      name: 'nvdashboard:culls',
      request: async () => {
        await this.readCulls();
        return this._policy.on ? 'ok' : 'stuck';
      },
      interval: options.cullsInterval ?? CULLS_INTERVAL_S * 1000,
      autoStart: options.autoStart
    });
    options.model.changed.connect(this._onGlance, this);
    options.localKernelsChanged?.connect(this._onGlance, this);
    this.ready = this._load();
  }

  /** Resolves once the memory is read (no notice is shown before). */
  readonly ready: Promise<void>;

  get settings(): IIdleNoticeSettings {
    return this._settings;
  }

  /** The user's settings; a change applies at the next reading. */
  set settings(value: IIdleNoticeSettings) {
    this._settings = value;
    this._use();
    this.check();
  }

  get policy(): ICullPolicy {
    return this._policy;
  }

  get memory(): INoticeMemory {
    return this._memory;
  }

  /** The notices on screen now: kernel id → notification id and episode. */
  get shown(): ReadonlyMap<string, IShownNotice> {
    return this._shown;
  }

  /**
   * Read the cull's policy, show the warnings the server holds armed (and
   * only those), report them on screen, and tell the user of any cull not
   * yet told.
   */
  async readCulls(): Promise<void> {
    const ask = ++this._asks;
    let parsed: ReturnType<typeof parseCulls>;
    try {
      parsed = parseCulls(await this._options.fetchCulls());
    } catch {
      // No answer: what was known stands (off until the server said; no
      // server extension, disabled or older, never says).
      return;
    }
    this._policy = parsed.policy;
    if (this._options.cullsInterval === undefined) {
      this._culls.interval = this._policy.reportEveryS * 1000;
    }
    this._use();
    await this.ready;
    let told = false;
    for (const cull of parsed.culls) {
      if (this._memory.cullsTold.includes(cull.key)) {
        continue;
      }
      this._memory.cullsTold = [...this._memory.cullsTold, cull.key].slice(
        -MEMORY_BOUND
      );
      told = true;
      this._options.notify(cullMessage(cull, this._trans), 'warning', []);
    }
    if (told) {
      this._save();
    }
    if (this._policy.on) {
      this._followServer(parsed.warnings, ask);
    }
  }

  /** Show every notice due in the last reading. */
  check(): void {
    const glance = this._options.model.glance;
    if (!this._loaded || !glance) {
      return;
    }
    this._forgetGone(glance);
    const now = this._now();
    for (const kernel of glance.kernels) {
      if (!this._options.isLocalKernel(kernel.kernel_id)) {
        continue;
      }
      const reason = noticeDue(
        kernel,
        this._settings,
        this._policy,
        this._memory,
        now
      );
      if (reason) {
        this._show(kernel, reason);
      }
    }
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._options.model.use(this, false);
    this._options.model.changed.disconnect(this._onGlance, this);
    this._options.localKernelsChanged?.disconnect(this._onGlance, this);
    clearTimeout(this._wake);
    this._culls.dispose();
  }

  private _onGlance(): void {
    this.check();
  }

  /**
   * Read the glance while a notice may be due, only as often as its
   * thresholds need; read the culls while one may act.
   */
  private _use(): void {
    if (this._disposed) {
      return;
    }
    this._options.model.use(
      this,
      this._settings.enabled || this._policy.on,
      noticeInterval(this._settings, this._policy)
    );
    this._culls.use(this, this._policy.on);
  }

  private async _load(): Promise<void> {
    try {
      this._memory = parseMemory(
        await this._options.store.fetch(NOTICE_STATE_ID)
      );
    } catch {
      this._memory = emptyMemory();
    }
    this._loaded = true;
    this._use();
    void this.readCulls();
    this.check();
  }

  private _save(): void {
    const value = this._memory as unknown as JSONObject;
    void this._options.store
      .save(NOTICE_STATE_ID, JSONExt.deepCopy(value))
      .catch(() => undefined);
  }

  /**
   * A notice whose idle episode is over (the kernel is gone, freed its
   * memory, works again, or can no longer be told apart) is taken off the
   * screen: its figures are out of date. Not the cull's warning: one
   * reading cannot end its episode, the server does (`_followServer`). A
   * kernel this server no longer runs needs no memory either.
   */
  private _forgetGone(glance: IGlance): void {
    const present = new Set(glance.kernels.map(k => k.kernel_id));
    const episodes = new Map(
      glance.kernels.map(k => [
        k.kernel_id,
        k.idle?.state === 'idle' ? k.idle.episode : null
      ])
    );
    for (const [id, shown] of this._shown) {
      // The cull's warning goes only when the server ends its episode.
      if (!shown.warning && episodes.get(id) !== shown.episode) {
        this._shown.delete(id);
        this._options.dismiss(shown.notification);
      }
    }
    let changed = false;
    for (const part of [this._memory.noticed, this._memory.snoozed]) {
      for (const id of Object.keys(part)) {
        if (!present.has(id) && !this._options.isLocalKernel(id)) {
          delete part[id];
          changed = true;
        }
      }
    }
    if (changed) {
      this._save();
    }
  }

  /**
   * The server's word on the cull's warnings: one it no longer holds goes
   * from the screen (its episode is over, or the kernel was kept or shut
   * down); one it holds stays, is shown again if it is not on screen (a
   * reload, an action that closed it) once a reading judges the kernel idle
   * in that episode, and is reported on screen.
   */
  private _followServer(armed: IArmedWarning[], ask: number): void {
    const held = new Map(armed.map(w => [w.kernel_id, w]));
    for (const [id, shown] of this._shown) {
      if (shown.warning && shown.postedAsk === null) {
        // Its first report: it has been drawn by now.
        this._post(id, shown);
        continue;
      }
      const postedAsk = shown.postedAsk;
      if (
        shown.warning &&
        postedAsk !== null &&
        ask > postedAsk &&
        held.get(id)?.episode !== shown.episode
      ) {
        this._shown.delete(id);
        this._options.dismiss(shown.notification);
      }
    }
    const kernels = new Map(
      (this._options.model.glance?.kernels ?? []).map(k => [k.kernel_id, k])
    );
    for (const warning of armed) {
      const id = warning.kernel_id;
      if (!this._options.isLocalKernel(id)) {
        continue;
      }
      const shown = this._shown.get(id);
      if (shown?.episode === warning.episode) {
        this._post(id, shown);
        continue;
      }
      // Shown again only as it was first shown: for the same idle episode.
      const kernel = kernels.get(id);
      if (
        kernel?.idle?.state === 'idle' &&
        kernel.idle.episode === warning.episode
      ) {
        this._show(kernel, 'cull', warning);
      }
    }
  }

  private _show(
    kernel: IGpuKernel,
    reason: NoticeReason,
    armed: IArmedWarning | null = null
  ): void {
    const trans = this._trans;
    const id = kernel.kernel_id;
    const episode = armed?.episode ?? kernel.idle?.episode ?? '';
    this._memory.noticed = lastEntries({
      ...this._memory.noticed,
      [id]: episode
    });
    delete this._memory.snoozed[id];
    this._save();
    // A notice from an earlier episode is out of date.
    const earlier = this._shown.get(id);
    if (earlier !== undefined) {
      this._options.dismiss(earlier.notification);
    }
    const done = (): void => {
      this._shown.delete(id);
    };
    const cull = this._policy.on;
    const actions: INoticeAction[] = [
      {
        label: trans.__('Shut down kernel'),
        caption: trans.__('Shut down the kernel of %1', kernel.path),
        displayType: 'warn',
        callback: () => {
          done();
          void this._shutdown(kernel);
        }
      },
      {
        label: trans.__('Open notebook'),
        caption: trans.__('Open %1', kernel.path),
        displayType: 'link',
        callback: () => {
          done();
          this._options.openPath(kernel.path);
        }
      },
      // With the cull on, only what the cull honours: "Not now" for longer
      // than the grace, or "Don't ask", would be a promise it breaks.
      ...(cull
        ? [
            {
              label: trans.__('Keep this kernel'),
              caption: trans.__(
                'No warning and no shutdown for %1',
                formatAge(this._policy.keepMinutes * 60_000, trans)
              ),
              displayType: 'accent' as const,
              callback: () => {
                done();
                void this._keep(kernel);
              }
            }
          ]
        : [
            {
              label: trans.__('Not now'),
              caption: trans.__(
                'Ask again in %1',
                formatAge(this._settings.snoozeMinutes * 60_000, trans)
              ),
              displayType: 'link' as const,
              callback: () => {
                done();
                this._snooze(
                  id,
                  this._now() + this._settings.snoozeMinutes * 60_000
                );
              }
            },
            {
              label: trans.__("Don't ask for this notebook"),
              caption: trans.__('Never ask about %1 again', kernel.path),
              displayType: 'link' as const,
              callback: () => {
                done();
                this._dontAsk(kernel.path);
              }
            }
          ])
    ];
    // Until the server says, a whole grace from its first report.
    const cullAtMs = armed
      ? armed.cull_at * 1000
      : cull
        ? this._now() +
          (this._policy.afterNoticeMinutes ?? 0) * 60_000 +
          this._culls.interval
        : null;
    const shown: IShownNotice = {
      notification: this._options.notify(
        noticeMessage(kernel, this._policy, cullAtMs, this._now(), trans),
        reason === 'cull' || cull ? 'warning' : 'info',
        actions
      ),
      episode,
      warning: cull,
      postedAsk: null,
      cullAtMs,
      rewordedAsk: null,
      kernel,
      actions
    };
    this._shown.set(id, shown);
    if (!cull) {
      this._post(id, shown);
    }
    // The cull's warning is first reported at the next read of the culls:
    // JupyterLab draws a notification some time after it is emitted, and
    // the grace counts from the report.
  }

  /**
   * Tell the server the notice is on screen; when its answer moves the
   * deadline the message shows, the message says the new one (and says it
   * again at a later read: `rewordedAsk`).
   */
  private _post(id: string, shown: IShownNotice): void {
    void this._options
      .postNotice(id, shown.episode)
      .then(cullAt => {
        if (this._shown.get(id) !== shown || !shown.warning) {
          return;
        }
        // A read of the culls asked for from now on knows of it.
        shown.postedAsk = this._asks;
        if (cullAt === null) {
          return;
        }
        const grace = this._policy.afterNoticeMinutes ?? 0;
        const before =
          shown.cullAtMs === null ? null : deadlineWords(shown.cullAtMs, grace);
        shown.cullAtMs = cullAt * 1000;
        const moved = before !== deadlineWords(shown.cullAtMs, grace);
        const again =
          shown.rewordedAsk !== null && this._asks > shown.rewordedAsk;
        if (moved || again) {
          shown.rewordedAsk = moved ? this._asks : null;
          this._options.reword(
            shown.notification,
            noticeMessage(
              shown.kernel,
              this._policy,
              shown.cullAtMs,
              this._now(),
              this._trans
            ),
            'warning',
            shown.actions
          );
        }
      })
      .catch(error => {
        // The cull then waits for the next report; the user saw this one.
        // A server that answered (404: not its kernel) judges it by the
        // next read of the culls, as one that took it.
        if (this._shown.get(id) === shown) {
          shown.postedAsk = this._asks;
        }
        console.warn(
          'nvdashboard: the server was not told of the notice',
          error
        );
      });
  }

  private async _keep(kernel: IGpuKernel): Promise<void> {
    let until: number | null;
    try {
      until = await this._options.postKeep(kernel.kernel_id);
    } catch (error) {
      this._options.showError?.(
        this._trans.__('Could not keep the kernel of %1', kernel.path),
        error
      );
      return;
    }
    if (until !== null) {
      this._snooze(kernel.kernel_id, until * 1000);
    }
  }

  private _snooze(kernelId: string, untilMs: number): void {
    // Quiet until then; after it, the notice comes once more.
    delete this._memory.noticed[kernelId];
    this._memory.snoozed = lastEntries({
      ...this._memory.snoozed,
      [kernelId]: untilMs
    });
    this._save();
    // Looked at again when it ends, even if no reading changes by then.
    clearTimeout(this._wake);
    this._wake = setTimeout(
      () => this.check(),
      Math.max(0, untilMs - this._now()) + 10
    );
  }

  private _dontAsk(path: string): void {
    if (!this._memory.dontAsk.includes(path)) {
      this._memory.dontAsk = [...this._memory.dontAsk, path].slice(
        -MEMORY_BOUND
      );
      this._save();
    }
  }

  private async _shutdown(kernel: IGpuKernel): Promise<void> {
    try {
      await this._options.shutdownKernel(kernel.kernel_id);
    } catch (error) {
      this._options.showError?.(
        this._trans.__('Could not shut down the kernel of %1', kernel.path),
        error
      );
      return;
    }
    // The row goes with an answer asked for after the shutdown.
    await this._options.model.refresh();
  }

  private _options: IdleNotifier.IOptions;
  private _now: () => number;
  private _trans: TranslationBundle;
  private _settings: IIdleNoticeSettings = DEFAULT_NOTICE_SETTINGS;
  private _policy: ICullPolicy = CULL_OFF;
  private _memory: INoticeMemory = emptyMemory();
  private _loaded = false;
  private _disposed = false;
  private _shown = new Map<string, IShownNotice>();
  private _culls: Poller;
  private _wake: ReturnType<typeof setTimeout> | undefined = undefined;
  private _asks = 0;
}
