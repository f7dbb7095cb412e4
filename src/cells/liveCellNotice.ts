/**
 * The live cell notice (issue 55, item 3): when one of the user's running
 * cells has held a GPU for the set time (default 5 minutes) and its verdict
 * so far is worth telling (the server's `notice`: held-idle, starved or
 * memory-bound; none where the GPU is shared and it cannot tell), JupyterLab's
 * notification says so, once per cell run, with a button that opens GPU
 * Activity on the span so far.
 *
 * What is worth telling is the server's judgment (diagnosis/cell.py's
 * `notice_cause`), the one the footer shows; this module only applies the
 * user's time and whether they want it. It reads the glance the Lab already
 * reads, whatever notebook is shown: a notice matters most when the user
 * looks elsewhere.
 */
import { TranslationBundle } from '@jupyterlab/translation';

import { cellGpus } from './cellFooter';
import { ILiveSource } from './notebookFooters';
import {
  cellLabel,
  ICellReport,
  parseCellReport,
  runningTime
} from './cellReport';
import { NOTICE_INTERVAL_MS } from '../idle/noticePace';
import { NULL_BUNDLE } from '../shared/format';
import { ITimeRange } from '../shared/tokens';

/** The user's settings for the notice. */
export interface ILiveCellNoticeSettings {
  enabled: boolean;
  /** Minutes a running cell must have held a GPU before it is told about. */
  minutes: number;
}

export const DEFAULT_LIVE_NOTICE_SETTINGS: ILiveCellNoticeSettings = {
  enabled: true,
  minutes: 5
};

/** A notification's button (JupyterLab's `Notification.IAction`). */
export interface ILiveNoticeAction {
  label: string;
  callback: () => void;
}

export namespace LiveCellNotices {
  export interface IOptions {
    model: ILiveSource;
    /** Show a warning (JupyterLab's `Notification.warning`). */
    notify: (message: string, actions: ILiveNoticeAction[]) => void;
    /** Open GPU Activity on this span. */
    open: (range: ITimeRange) => void;
    trans?: TranslationBundle;
  }
}

/**
 * The notice's words for a cell: what it does, in the footer's terms, short
 * enough for a notification (the footer and Open GPU Activity say more).
 */
export function noticeWords(
  path: string,
  report: ICellReport,
  trans: TranslationBundle = NULL_BUNDLE
): string {
  const held = runningTime(report.held_s, trans);
  const name = cellLabel(report.count, trans);
  const gpus =
    report.gpus.map(gpu => gpu.label).join(', ') || trans.__('a GPU');
  const what =
    report.notice === 'held-idle'
      ? trans.__('has held %1 for %2 and barely used it', gpus, held)
      : report.notice === 'starved'
        ? trans.__(
            'has held %1 for %2 and keeps it waiting between bursts of work (starved)',
            gpus,
            held
          )
        : trans.__(
            'has held %1 for %2 and waits on its memory bandwidth (memory-bound)',
            gpus,
            held
          );
  return trans.__('%1, %2 %3.', path, name, what);
}

/** The notices (see the module comment). */
export class LiveCellNotices {
  constructor(options: LiveCellNotices.IOptions) {
    this._options = options;
    this._trans = options.trans ?? NULL_BUNDLE;
    this.settings = { ...DEFAULT_LIVE_NOTICE_SETTINGS, enabled: false };
  }

  get settings(): ILiveCellNoticeSettings {
    return this._settings;
  }

  /** Off, it reads nothing; on, the glance at the notice's pace. */
  set settings(value: ILiveCellNoticeSettings) {
    this._settings = value;
    const model = this._options.model;
    if (value.enabled && !this._listening) {
      model.changed.connect(this._check, this);
    } else if (!value.enabled && this._listening) {
      model.changed.disconnect(this._check, this);
    }
    this._listening = value.enabled;
    // The idle notice's pace: a notice after minutes needs no reading a second.
    model.use(this, value.enabled, NOTICE_INTERVAL_MS);
    this._check();
  }

  /** How many notices it showed (tests). */
  get told(): number {
    return this._told.size;
  }

  dispose(): void {
    this.settings = { ...this._settings, enabled: false };
  }

  private _check(): void {
    const glance = this._options.model.glance;
    if (!this._settings.enabled || !glance) {
      return;
    }
    for (const kernel of glance.kernels) {
      const report = parseCellReport(kernel.cell);
      if (
        report === null ||
        !report.running ||
        report.notice === null ||
        report.held_s < this._settings.minutes * 60
      ) {
        continue;
      }
      // Once per cell run: the kernel and the start of its cell.
      const key = `${kernel.kernel_id}:${report.start_s}`;
      if (this._told.has(key)) {
        continue;
      }
      this._told.add(key);
      const range: ITimeRange = {
        start_s: report.start_s,
        end_s: report.end_s,
        label: cellLabel(report.count, this._trans),
        ...cellGpus(report)
      };
      this._options.notify(noticeWords(kernel.path, report, this._trans), [
        {
          label: this._trans.__('Open GPU Activity'),
          callback: () => this._options.open(range)
        }
      ]);
    }
  }

  private _options: LiveCellNotices.IOptions;
  private _trans: TranslationBundle;
  private _settings: ILiveCellNoticeSettings = DEFAULT_LIVE_NOTICE_SETTINGS;
  private _listening = false;
  private _told = new Set<string>();
}
