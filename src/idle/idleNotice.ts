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
 * The words and the rules are pure functions; `IdleNotifier` connects them
 * to the glance poll, the notification manager and the state database.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { JSONExt, JSONObject } from '@lumino/coreutils';
import { ISignal } from '@lumino/signaling';

import { IGlance, IGpuKernel } from '../glance/glance';
import { GlanceModel } from '../glance/glanceModel';
import {
  formatAge,
  formatMemory,
  NULL_BUNDLE,
  numberOrNull
} from '../shared/format';
import { Poller } from '../shared/poller';

const GIB = 2 ** 30;

/** How often the cull's list is read while the server has not said (s). */
export const CULLS_INTERVAL_S = 10;

/** JupyterLab cuts a notification's message at this many characters. */
export const NOTICE_MAX_CHARS = 140;

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

/** The admin's thresholds in bytes and seconds. */
export function cullThresholds(policy: ICullPolicy): IIdleThresholds {
  return {
    minBytes: policy.minHeldBytes,
    idleSeconds: policy.idleMinutes * 60
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

/**
 * What the notice remembers across reloads (the state database), all of
 * it bounded: kernel id → the episode shown, kernel id → snoozed until
 * (ms), notebook paths not to ask about, culls already told.
 */
export interface INoticeMemory {
  noticed: Record<string, string>;
  snoozed: Record<string, number>;
  dontAsk: string[];
  cullsTold: string[];
}

/** How many entries each part of the memory keeps (the oldest go first). */
export const MEMORY_BOUND = 200;

export function emptyMemory(): INoticeMemory {
  return { noticed: {}, snoozed: {}, dontAsk: [], cullsTold: [] };
}

/** The last MEMORY_BOUND entries whose values pass `ok`, in their order. */
function lastEntries<T>(
  record: Record<string, unknown>,
  ok: (v: unknown) => v is T = (v: unknown): v is T => true
): Record<string, T> {
  const kept: Record<string, T> = {};
  for (const [key, value] of Object.entries(record)
    .filter(entry => ok(entry[1]))
    .slice(-MEMORY_BOUND)) {
    kept[key] = value as T;
  }
  return kept;
}

function pairs<T>(
  value: unknown,
  ok: (v: unknown) => v is T
): Record<string, T> {
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    return {};
  }
  return lastEntries(value as Record<string, unknown>, ok);
}

function texts(value: unknown): string[] {
  return Array.isArray(value)
    ? value.filter(isString).slice(-MEMORY_BOUND)
    : [];
}

function isString(value: unknown): value is string {
  return typeof value === 'string';
}

function isNumber(value: unknown): value is number {
  return numberOrNull(value) !== null;
}

/** The memory from the state database; anything malformed is dropped. */
export function parseMemory(value: unknown): INoticeMemory {
  const m = (value ?? {}) as Record<string, unknown>;
  return {
    noticed: pairs(m.noticed, isString),
    snoozed: pairs(m.snoozed, isNumber),
    dontAsk: texts(m.dontAsk),
    cullsTold: texts(m.cullsTold)
  };
}

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

/** The parts of JupyterLab's state database the notice uses. */
export interface INoticeStore {
  fetch(id: string): Promise<unknown>;
  save(id: string, value: JSONObject): Promise<unknown>;
}

/** Where the notice keeps its memory in the state database. */
export const NOTICE_STATE_ID = 'jupyterlab-nvdashboard:idle-notice';

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
   * deadline the message shows, the message says the new one.
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
        if (before !== deadlineWords(shown.cullAtMs, grace)) {
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
