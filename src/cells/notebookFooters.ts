/**
 * One notebook's cell footers (the controller; the view is cellFooter.ts).
 * For each cell run it asks `/cell.json` once, with the span the kernel
 * stamped (cellSpans.ts), and never while the notebook is hidden (a hidden
 * notebook's runs are asked about when it is shown again); an answer for an
 * older run than the cell's last is dropped. The footer lives in the page
 * only; it goes into the notebook file (the cell's `nvdashboard` metadata)
 * only when the user's setting asks for it, and a footer saved there is
 * shown again when the notebook is opened. A footer not saved is told to
 * `footerShown`, and where a reload dropped them a hint stands in the first
 * one's place (`showHint`, footerHint.ts). Each footer is placed into
 * JupyterLab's cell layout, below the cell's output.
 *
 * While a cell runs, its footer is live (issue 55): the glance, which the Lab
 * reads over one socket, carries each GPU kernel's running cell so far
 * (the server's judgment, by the finished footer's rules); the footer shows
 * it with the kernel's memory and work now, at most once a second, and not
 * at all while the notebook is hidden. The finished footer takes its place.
 *
 * It is over 400 lines because `NotebookCellFooters` is one object over one
 * notebook's state (runs asked about, run generations, footers shown, the
 * live footers): its scheduling, metadata and placement all read and write
 * that state, and split apart they would share it through back doors.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { ISignal } from '@lumino/signaling';
import { Layout, PanelLayout, Widget } from '@lumino/widgets';

import { errorMessage } from '../shared/errors';
import { NULL_BUNDLE } from '../shared/format';
import { ITimeRange } from '../shared/tokens';
import { CellGpuFooter, ICellFooterContent } from './cellFooter';
import {
  CellFooterMode,
  FetchCellReport,
  ICellReport,
  parseCellReport,
  showsFooter
} from './cellReport';
import { ICellSpan, IRunningCell } from './cellSpans';

/** The cell metadata key a footer is saved under (only when a setting asks). */
export const CELL_METADATA_KEY = 'nvdashboard';

/**
 * How long after a cell's reply its report is asked for: the driver samples
 * per-process use about once a second, and the server reads process lists
 * at its own rate, so the last readings of the span arrive after the reply.
 */
export const CELL_REPORT_DELAY_MS = 1500;

/** The live footer's pace at most (ms): the server judges no faster. */
export const LIVE_INTERVAL_MS = 1000;

/** The glance as the live footers read it (glanceModel.ts's `GlanceModel`). */
export interface ILiveSource {
  readonly glance: {
    time: number | null;
    kernels: ReadonlyArray<{
      kernel_id: string;
      path: string;
      memory_bytes: number;
      own_pct: number | null;
      cell: unknown;
    }>;
  } | null;
  readonly changed: ISignal<unknown, unknown>;
  /** Say whether `user` reads the glance now, and at what pace (ms). */
  use(user: unknown, inUse: boolean, intervalMs?: number): void;
}

/**
 * The running cell's report so far in a glance, with its figures now, when
 * the kernel's running cell is this one (the same start: the server's is
 * the same `execute_input` date, read by the Jupyter server's extension).
 */
export function liveContent(
  glance: ILiveSource['glance'],
  run: IRunningCell
): ICellFooterContent | null {
  const kernel = glance?.kernels.find(k => k.kernel_id === run.kernelId);
  const report = kernel ? parseCellReport(kernel.cell) : null;
  const start = Date.parse(run.start) / 1000;
  if (
    !kernel ||
    report === null ||
    !report.running ||
    !(Math.abs(report.start_s - start) < SAME_START_S)
  ) {
    return null;
  }
  const now = glance?.time ?? report.end_s;
  return {
    report,
    count: run.count,
    live: {
      running_s: Math.max(report.duration_s, now - report.start_s),
      memory_bytes: kernel.memory_bytes,
      own_pct: kernel.own_pct
    }
  };
}

/**
 * Two starts this close are the same cell's: the browser parses the date
 * to the millisecond, the server to the microsecond.
 */
const SAME_START_S = 0.002;

/** A cell as the footers reach it (a subset of `Cell`). */
export interface IFooterCell {
  readonly layout: Layout | null;
  readonly isDisposed: boolean;
  /** Resolves once the cell has rendered (JupyterLab 4 `Cell.ready`). */
  readonly ready?: Promise<void>;
  readonly model: {
    readonly id: string;
    getMetadata(key: string): unknown;
    setMetadata(key: string, value: any): void;
    deleteMetadata(key: string): void;
  };
}

export namespace NotebookCellFooters {
  export interface IOptions {
    /** The notebook's cells now. */
    cells: () => ReadonlyArray<IFooterCell>;
    /** GET `/cell.json` for a span; resolves with its parsed body. */
    fetchReport: FetchCellReport;
    /** Open /GPU-Activity on a span. */
    open: (range: ITimeRange) => void;
    /**
     * Whether the dashboard server said, in a way that will not change by
     * itself, that there is nothing to judge (no GPU on the machine, no
     * server behind the proxy): then a cell could never get a GPU footer,
     * and under `gpu` nothing is asked.
     */
    nothingToJudge?: () => boolean;
    mode?: CellFooterMode;
    /** Save each footer into the notebook (the cell's metadata). */
    save?: boolean;
    /** Whether the notebook is on screen now. */
    visible?: boolean;
    delayMs?: number;
    trans?: TranslationBundle;
    /** A footer was shown under this cell and not saved into the notebook. */
    footerShown?: (cellId: string) => void;
    /** The glance, for the running cells' live footers; none: no live footer. */
    live?: ILiveSource;
  }
}

/** One notebook's footers (see the module comment). */
export class NotebookCellFooters {
  constructor(options: NotebookCellFooters.IOptions) {
    this._options = options;
    this._mode = options.mode ?? 'gpu';
    this._save = options.save ?? false;
    this._visible = options.visible ?? false;
    this._delayMs = options.delayMs ?? CELL_REPORT_DELAY_MS;
    this._trans = options.trans ?? NULL_BUNDLE;
  }

  /** How many `/cell.json` requests it made (tests, benchmarks). */
  get requests(): number {
    return this._requests;
  }

  get mode(): CellFooterMode {
    return this._mode;
  }

  /** Off removes every footer and asks nothing; the others redraw at once. */
  set mode(value: CellFooterMode) {
    if (value === this._mode) {
      return;
    }
    this._mode = value;
    if (value === 'off') {
      this._waiting.clear();
      this._clearTimers();
      this._hint?.dispose(); // no footers wanted: nothing to keep
    }
    this._redraw();
    this._useLive();
  }

  get save(): boolean {
    return this._save;
  }

  /** Whether footers go into the notebook file; applies to the next runs. */
  set save(value: boolean) {
    this._save = value;
    if (value) {
      this._hint?.dispose(); // what the hint asks for is done
    }
  }

  /** The hint in a footer's place (footerHint.ts), while it stands. */
  get hint(): Widget | null {
    return this._hint;
  }

  /**
   * Put `hint` in this cell's footer place (last in its layout, once it has
   * rendered), in place of any hint before; it goes when the cell runs again.
   */
  showHint(cellId: string, hint: Widget): void {
    this._hint?.dispose();
    const cell = this._find(cellId);
    if (!cell || this._disposed) {
      hint.dispose();
      return;
    }
    this._hint = hint;
    this._hintCell = cellId;
    hint.disposed.connect(() => {
      if (this._hint === hint) {
        this._hint = null;
        this._hintCell = null;
      }
    });
    const put = (): void => {
      const layout = cell.layout;
      if (hint.isDisposed) {
        return;
      }
      if (cell.isDisposed || !(layout instanceof PanelLayout)) {
        hint.dispose();
        return;
      }
      layout.addWidget(hint);
    };
    if (cell.ready !== undefined && !this._rendered.has(cell)) {
      void cell.ready.then(() => {
        this._rendered.add(cell);
        put();
      });
    } else {
      put();
    }
  }

  get visible(): boolean {
    return this._visible;
  }

  /**
   * Whether the notebook is on screen. Hidden, nothing is asked (a wait
   * already set is put back); shown again, each waiting run is asked once.
   */
  set visible(value: boolean) {
    if (value === this._visible) {
      return;
    }
    this._visible = value;
    this._useLive();
    if (!value) {
      this._clearTimers();
      return;
    }
    this._showLive();
    for (const span of this._waiting.values()) {
      this._schedule(span);
    }
  }

  /**
   * The kernel runs this cell now: its footer is live while it runs and the
   * notebook is shown (the glance's report so far, `ILiveSource`).
   */
  cellRunning(run: IRunningCell): void {
    if (!this._options.live) {
      return;
    }
    this._running.set(run.cellId, run);
    this._useLive();
    this._showLive();
  }

  /**
   * The kernel went away (restarted, died, changed): no cell of it runs on,
   * and a live footer of one that never ended goes (it would say "running"
   * for good).
   */
  kernelGone(): void {
    for (const cellId of this._running.keys()) {
      const cell = this._find(cellId);
      if (this._shown.get(cellId)?.live) {
        this._shown.delete(cellId);
        if (cell) {
          this._place(cell, null);
        }
      }
    }
    this._running.clear();
    this._useLive();
  }

  /** A cell was sent to run: its footer is out of date, and so is any answer. */
  cellStarted(cellId: string): void {
    this._generation.set(cellId, (this._generation.get(cellId) ?? 0) + 1);
    this._waiting.delete(cellId);
    this._clearTimer(cellId);
    this._shown.delete(cellId);
    if (this._hintCell === cellId) {
      this._hint?.dispose(); // its footer place is the new run's
    }
    const cell = this._find(cellId);
    if (cell) {
      this._place(cell, null);
      if (cell.model.getMetadata(CELL_METADATA_KEY) !== undefined) {
        cell.model.deleteMetadata(CELL_METADATA_KEY);
      }
    }
  }

  /**
   * A cell ran: ask about its span once (now if shown, else when shown). A
   * run the cell was sent again after is not asked about: its footer would
   * stand under the newer run, still running (`[*]`).
   */
  cellEnded(span: ICellSpan): void {
    if (this._running.get(span.cellId)?.start === span.start) {
      this._running.delete(span.cellId);
      this._useLive();
    }
    if (this._mode === 'off' || span.superseded) {
      return;
    }
    this._waiting.set(span.cellId, span);
    if (this._visible) {
      this._schedule(span);
    }
  }

  /**
   * Show the footers saved in the notebook file (when it is opened), each
   * once its cell has rendered: JupyterLab 4 fills a cell in on its first
   * render, and a footer added before would stand above the cell's input.
   */
  restoreSaved(): void {
    for (const cell of this._options.cells()) {
      const saved = savedContent(cell.model.getMetadata(CELL_METADATA_KEY));
      if (saved && !this._shown.has(cell.model.id)) {
        this._shown.set(cell.model.id, saved);
        this._place(cell, saved);
      }
    }
  }

  dispose(): void {
    this._clearTimers();
    this._waiting.clear();
    this._hint?.dispose();
    this._running.clear();
    this._useLive();
    this._disposed = true;
  }

  /**
   * Read the glance while a cell runs and the footers can show it (shown,
   * not off): at the live pace, and not at all otherwise.
   */
  private _useLive(): void {
    const live = this._options.live;
    if (!live) {
      return;
    }
    const wanted =
      !this._disposed &&
      this._visible &&
      this._mode !== 'off' &&
      this._running.size > 0;
    if (wanted && !this._liveUsed) {
      live.changed.connect(this._showLive, this);
    } else if (!wanted && this._liveUsed) {
      live.changed.disconnect(this._showLive, this);
    }
    this._liveUsed = wanted;
    live.use(this, wanted, LIVE_INTERVAL_MS);
  }

  /** Each running cell's live footer, from the glance now. */
  private _showLive(): void {
    const live = this._options.live;
    if (!live || !this._visible || this._mode === 'off' || this._disposed) {
      return;
    }
    for (const run of this._running.values()) {
      const content = liveContent(live.glance, run);
      const cell = this._find(run.cellId);
      if (content === null || cell === null) {
        continue;
      }
      this._shown.set(run.cellId, content);
      this._place(cell, content);
    }
  }

  private _schedule(span: ICellSpan): void {
    this._clearTimer(span.cellId);
    this._timers.set(
      span.cellId,
      setTimeout(() => {
        this._timers.delete(span.cellId);
        void this._ask(span);
      }, this._delayMs)
    );
  }

  private async _ask(span: ICellSpan): Promise<void> {
    if (this._disposed || !this._visible || this._mode === 'off') {
      return;
    }
    this._waiting.delete(span.cellId);
    if (this._mode === 'gpu' && this._options.nothingToJudge?.()) {
      return;
    }
    const generation = this._generation.get(span.cellId) ?? 0;
    this._requests++;
    let report: ICellReport | null;
    try {
      report = parseCellReport(
        await this._options.fetchReport(span.kernelId, span.start, span.end)
      );
    } catch (error) {
      // No footer is better than a wrong one; the cell can be run again.
      console.warn(
        `nvdashboard: no GPU report for a cell: ${errorMessage(error)}`
      );
      return;
    }
    if (
      this._disposed ||
      report === null ||
      (this._generation.get(span.cellId) ?? 0) !== generation
    ) {
      return;
    }
    const content = { report, count: span.count };
    this._shown.set(span.cellId, content);
    const cell = this._find(span.cellId);
    if (!cell) {
      return;
    }
    if (this._save) {
      cell.model.setMetadata(CELL_METADATA_KEY, { ...content });
    }
    this._place(cell, content);
    if (!this._save && showsFooter(report, this._mode)) {
      this._options.footerShown?.(cell.model.id);
    }
  }

  private _redraw(): void {
    for (const cell of this._options.cells()) {
      this._place(cell, this._shown.get(cell.model.id) ?? null);
    }
  }

  /**
   * Put this content's footer under the cell (none for null or by the mode),
   * once the cell has rendered (`ready`), last in its layout.
   */
  private _place(cell: IFooterCell, content: ICellFooterContent | null): void {
    if (cell.ready !== undefined && !this._rendered.has(cell)) {
      void cell.ready.then(() => {
        this._rendered.add(cell);
        if (!this._disposed) {
          this._place(cell, this._shown.get(cell.model.id) ?? null);
        }
      });
      return;
    }
    const layout = cell.layout;
    if (cell.isDisposed || !(layout instanceof PanelLayout)) {
      return;
    }
    const old = layout.widgets.find(w => w instanceof CellGpuFooter) as
      CellGpuFooter | undefined;
    const wanted =
      content !== null && showsFooter(content.report, this._mode)
        ? content
        : null;
    if (old && old.content.report === wanted?.report) {
      return;
    }
    if (old && wanted && old.content.live && wanted.live) {
      old.setContent(wanted); // the same run so far: what changed, in place
      return;
    }
    old?.dispose();
    if (wanted) {
      layout.addWidget(
        new CellGpuFooter({
          ...wanted,
          open: this._options.open,
          trans: this._trans
        })
      );
    }
  }

  private _find(cellId: string): IFooterCell | null {
    return (
      this._options.cells().find(c => c.model.id === cellId && !c.isDisposed) ??
      null
    );
  }

  private _clearTimer(cellId: string): void {
    const timer = this._timers.get(cellId);
    if (timer !== undefined) {
      clearTimeout(timer);
      this._timers.delete(cellId);
    }
  }

  private _clearTimers(): void {
    for (const timer of this._timers.values()) {
      clearTimeout(timer);
    }
    this._timers.clear();
  }

  private _options: NotebookCellFooters.IOptions;
  private _mode: CellFooterMode;
  private _save: boolean;
  private _visible: boolean;
  private _delayMs: number;
  private _trans: TranslationBundle;
  private _disposed = false;
  private _requests = 0;
  /** Runs not asked about yet, by cell id (the last run of each). */
  private _waiting = new Map<string, ICellSpan>();
  private _timers = new Map<string, ReturnType<typeof setTimeout>>();
  /** Each cell's run count here, so an answer for an older run is dropped. */
  private _generation = new Map<string, number>();
  /** What each cell's footer shows (kept when the mode hides it). */
  private _shown = new Map<string, ICellFooterContent>();
  /** Cells seen rendered (their `ready` resolved). */
  private _rendered = new WeakSet<IFooterCell>();
  private _hint: Widget | null = null;
  private _hintCell: string | null = null;
  /** The cells the kernel runs now, by cell id. */
  private _running = new Map<string, IRunningCell>();
  private _liveUsed = false;
}

/** A footer saved in a cell's metadata, or null when there is none or it is odd. */
export function savedContent(value: unknown): ICellFooterContent | null {
  const saved = (value ?? {}) as Record<string, unknown>;
  const report = parseCellReport(saved.report);
  if (report === null) {
    return null;
  }
  return {
    report,
    count: typeof saved.count === 'number' ? saved.count : null
  };
}
