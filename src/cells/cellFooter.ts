/**
 * The footer under each notebook cell that touched a GPU (the view): the
 * server's verdict in one line; on hover or keyboard focus, the figures and
 * findings; a click (Enter, Space) opens /GPU-Activity on the cell's span,
 * marked. While a cell runs, its footer is live: the same view, marked
 * running, with the figures so far. Which footer stands under which cell,
 * and when it is asked for, is the notebook's controller's
 * (notebookFooters.ts).
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { element } from '../shared/dom';
import { NULL_BUNDLE } from '../shared/format';
import { ITimeRange } from '../shared/tokens';
import {
  cellDetailLines,
  cellLabel,
  ICellReport,
  ILiveFigures,
  liveLine
} from './cellReport';

let footerSerial = 0;

/** Class of a footer (tests and browser tests find them by it). */
export const CELL_FOOTER_CLASS = 'nvdashboard-cell-footer';

/** A footer whose figures Escape closed (until pointer and focus leave it). */
export const DISMISSED_CLASS = 'nvdashboard-mod-dismissed';

/** Class of a running cell's live footer. */
export const RUNNING_CLASS = 'nvdashboard-mod-running';

/** What a cell's footer shows: the server's report and the cell's count. */
export interface ICellFooterContent {
  report: ICellReport;
  count: number | null;
  /** A running cell's figures now (its live footer); absent once it ended. */
  live?: ILiveFigures;
}

export namespace CellGpuFooter {
  export interface IOptions extends ICellFooterContent {
    /** Open /GPU-Activity on this span. */
    open: (range: ITimeRange) => void;
    trans?: TranslationBundle;
  }
}

/** One cell's footer (see the module comment). */
export class CellGpuFooter extends Widget {
  constructor(options: CellGpuFooter.IOptions) {
    super();
    this._trans = options.trans ?? NULL_BUNDLE;
    this.content = { report: options.report, count: options.count };
    this.addClass(CELL_FOOTER_CLASS);
    // Keys pressed on the footer are the footer's (Enter opens the
    // timeline), not the notebook's shortcuts (Enter would edit the cell).
    this.node.setAttribute('data-lm-suppress-shortcuts', 'true');
    const detailsId = `nvdashboard-cell-details-${++footerSerial}`;
    this._button = element(
      'button',
      'nvdashboard-cell-verdict jp-mod-styled',
      undefined,
      { type: 'button', 'aria-describedby': detailsId }
    );
    this._details = element('div', 'nvdashboard-cell-details', undefined, {
      id: detailsId,
      role: 'tooltip'
    });
    this.node.append(this._button, this._details);
    this.setContent(options);
    this._button.addEventListener('click', () => options.open(this._range));
    // While the figures may show (pointer over the footer, or focus in it),
    // Escape anywhere hides them (WCAG 1.4.13: dismissible without moving
    // the pointer or the focus) until both have left the footer.
    this.node.addEventListener('mouseenter', this._onEnter);
    this.node.addEventListener('focusin', this._onEnter);
    this.node.addEventListener('mouseleave', this._onLeave);
    this.node.addEventListener('focusout', this._onLeave);
  }

  dispose(): void {
    document.removeEventListener('keydown', this._onKey, true);
    super.dispose();
  }

  private _onEnter = (): void => {
    document.addEventListener('keydown', this._onKey, true);
  };

  private _onLeave = (event: Event): void => {
    const to = (event as FocusEvent | MouseEvent).relatedTarget;
    const hovered = this.node.matches(':hover');
    const focused = to instanceof Node && this.node.contains(to);
    if (!hovered && !focused && !this.node.contains(document.activeElement)) {
      document.removeEventListener('keydown', this._onKey, true);
      this.removeClass(DISMISSED_CLASS);
    }
  };

  private _onKey = (event: KeyboardEvent): void => {
    if (event.key === 'Escape' && !this.hasClass(DISMISSED_CLASS)) {
      this.addClass(DISMISSED_CLASS);
    }
  };

  /**
   * Show this content: a running cell's footer is given its report so far
   * at each glance, and only what changed is written (the button's line,
   * the details), so a message that changes nothing redraws nothing and the
   * keyboard's focus stays on the button.
   */
  setContent(content: ICellFooterContent): void {
    const { report, count, live } = content;
    const trans = this._trans;
    this.content = { report, count, live };
    if (this.hasClass(RUNNING_CLASS) !== (live !== undefined)) {
      this.toggleClass(RUNNING_CLASS, live !== undefined);
    }
    if (this.node.dataset.touchedGpu !== String(report.touched_gpu)) {
      this.node.dataset.touchedGpu = String(report.touched_gpu);
    }
    const line = live ? liveLine(report, live, trans) : report.verdict;
    if (this._button.textContent !== line) {
      this._button.textContent = line;
      this._button.setAttribute('aria-label', trans.__('GPU: %1', line));
    }
    const lines = [
      ...cellDetailLines(report, count, trans),
      trans.__('Click to open GPU Activity on this cell.')
    ];
    const shown = Array.from(this._details.children, c => c.textContent);
    if (lines.join('\n') !== shown.join('\n')) {
      this._details.replaceChildren(
        ...lines.map((text, i) =>
          element(
            'div',
            i < lines.length - 1
              ? 'nvdashboard-cell-detail'
              : 'nvdashboard-cell-hint',
            text
          )
        )
      );
    }
    this._range = {
      start_s: report.start_s,
      end_s: report.end_s,
      label: cellLabel(count, trans),
      ...cellGpus(report)
    };
  }

  /** What it shows (a live footer's changes at each update). */
  content: ICellFooterContent;

  /** The verdict button (it takes the keyboard). */
  get button(): HTMLButtonElement {
    return this._button;
  }

  private _button: HTMLButtonElement;
  private _details: HTMLElement;
  private _trans: TranslationBundle;
  private _range: ITimeRange = { start_s: 0, end_s: 0, label: '' };
}

/**
 * The GPUs /GPU-Activity shows alone for this cell: every GPU of its report,
 * by UUID. None (every GPU shown) when the report names none, or one without
 * its UUID (a footer saved by an older version): no GPU of the cell is hidden.
 */
export function cellGpus(report: ICellReport): { gpus?: string[] } {
  const uuids = report.gpus.map(gpu => gpu.uuid);
  if (!uuids.length || uuids.some(uuid => uuid === null)) {
    return {};
  }
  return { gpus: Array.from(new Set(uuids as string[])) };
}
