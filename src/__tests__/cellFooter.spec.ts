/**
 * GPU per cell in the notebook: spans from the kernel's own messages, one
 * `/cell.json` request per cell run and none while the notebook is hidden,
 * the footer's words, hover/focus details and click, and the setting that
 * saves it into the notebook.
 */
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import {
  CELL_FOOTER_CLASS,
  CellGpuFooter,
  cellGpus
} from '../cells/cellFooter';
import {
  CELL_METADATA_KEY,
  IFooterCell,
  NotebookCellFooters
} from '../cells/notebookFooters';
import { cellDetailLines, parseCellReport } from '../cells/cellReport';
import {
  CellSpanWatcher,
  ICellSpan,
  IKernelMessageLike
} from '../cells/cellSpans';
import { ITimeRange } from '../shared/tokens';
import { cell, footerOf } from './fakes';

const GIB = 2 ** 30;

/** The contract's example answer (contract45.md), a busy cell. */
const BUSY = {
  kernel: 'k1',
  notebook: 'a.ipynb',
  start_s: 1764936000.1,
  end_s: 1764936041.3,
  duration_s: 41.2,
  judged_from: 'memory',
  resolution_s: 0.2,
  too_short: false,
  touched_gpu: true,
  gpus: [
    {
      index: 1,
      label: 'GPU 1',
      uuid: 'GPU-1',
      mig: null,
      lost: false,
      memory: {
        start_bytes: 10.2 * GIB,
        end_bytes: 12.3 * GIB,
        peak_bytes: 12.3 * GIB,
        change_bytes: 2.1 * GIB
      },
      signal: 'per-process',
      sm_pct: 87,
      working_share: 0.91,
      findings: [
        {
          cause: 'starved',
          line: 'GPU 1 waits on the host 12% of the time.',
          advice: 'prefetch the next batch',
          figures: [{ name: 'time in gaps', value: 12, unit: '%' }]
        }
      ]
    }
  ],
  verdict: 'GPU 1: busy 91% of 41 s, peak 12.3 GiB (+2.1)'
};

const NO_GPU = {
  ...BUSY,
  touched_gpu: false,
  gpus: [],
  verdict: 'no GPU work'
};

/** A kernel connection whose messages the test sends. */
class FakeKernel {
  id = 'k1';
  anyMessage = new Signal<
    unknown,
    { msg: IKernelMessageLike; direction: 'send' | 'recv' }
  >(this);
  private _serial = 0;

  /** JupyterLab sends a cell to run; returns the request's id. */
  request(cellId: string): string {
    const id = `req-${++this._serial}`;
    this.anyMessage.emit({
      direction: 'send',
      msg: {
        header: { msg_id: id, msg_type: 'execute_request', date: '' },
        parent_header: {},
        metadata: { cellId },
        content: { code: 'x' },
        channel: 'shell'
      }
    });
    return id;
  }

  /** The kernel answers: a message of `type` stamped `date`, for request `parent`. */
  answer(
    parent: string,
    type: string,
    date: string,
    content: Record<string, unknown> = {}
  ): void {
    this.anyMessage.emit({
      direction: 'recv',
      msg: {
        header: { msg_id: `m-${++this._serial}`, msg_type: type, date },
        parent_header: { msg_id: parent },
        metadata: {},
        content,
        channel: type === 'execute_reply' ? 'shell' : 'iopub'
      }
    });
  }
}

describe('CellSpanWatcher', () => {
  it("takes a cell's span from the kernel's execute_input and execute_reply dates, never the browser's clock", () => {
    const kernel = new FakeKernel();
    const watcher = new CellSpanWatcher(kernel);
    const started: string[] = [];
    const ended: ICellSpan[] = [];
    watcher.started.connect((_, id) => started.push(id));
    watcher.ended.connect((_, span) => ended.push(span));
    // A browser clock an hour off: nothing may read it.
    const now = jest.spyOn(Date, 'now').mockReturnValue(0);
    const request = kernel.request('cell-a');
    kernel.answer('other', 'execute_input', '2026-12-05T11:00:00Z');
    kernel.answer(request, 'status', '2026-12-05T12:03:03.900Z', {
      execution_state: 'busy'
    });
    kernel.answer(request, 'execute_input', '2026-12-05T12:03:04.123456Z', {
      execution_count: 12
    });
    kernel.answer(request, 'execute_reply', '2026-12-05T12:03:45.5Z', {
      execution_count: 12,
      status: 'ok'
    });
    expect(started).toEqual(['cell-a']);
    expect(ended).toEqual([
      {
        kernelId: 'k1',
        cellId: 'cell-a',
        count: 12,
        start: '2026-12-05T12:03:04.123456Z',
        end: '2026-12-05T12:03:45.5Z'
      }
    ]);
    expect(now).not.toHaveBeenCalled();
    now.mockRestore();
    watcher.dispose();
  });

  it('gives no span for a request the kernel never ran (no execute_input), nor after dispose', () => {
    const kernel = new FakeKernel();
    const watcher = new CellSpanWatcher(kernel);
    const ended: ICellSpan[] = [];
    watcher.ended.connect((_, span) => ended.push(span));
    const skipped = kernel.request('cell-b');
    kernel.answer(skipped, 'execute_reply', '2026-12-05T12:00:01Z', {
      status: 'aborted'
    });
    watcher.dispose();
    const late = kernel.request('cell-c');
    kernel.answer(late, 'execute_input', '2026-12-05T12:00:02Z');
    kernel.answer(late, 'execute_reply', '2026-12-05T12:00:03Z');
    expect(ended).toEqual([]);
  });
});

function span(cellId: string, count = 1): ICellSpan {
  return {
    kernelId: 'k1',
    cellId,
    count,
    start: '2026-12-05T12:00:00.1Z',
    end: '2026-12-05T12:00:41.3Z'
  };
}

function footers(
  cells: IFooterCell[],
  answers: Record<string, unknown>,
  options: Partial<NotebookCellFooters.IOptions> = {}
) {
  const asked: Array<[string, string, string]> = [];
  const opened: ITimeRange[] = [];
  let lastCell = '';
  const controller = new NotebookCellFooters({
    cells: () => cells,
    fetchReport: async (kernel, start, end) => {
      asked.push([kernel, start, end]);
      return answers[lastCell];
    },
    open: range => opened.push(range),
    visible: true,
    delayMs: 10,
    ...options
  });
  const end = (s: ICellSpan) => {
    lastCell = s.cellId;
    controller.cellEnded(s);
  };
  return { controller, asked, opened, end };
}

async function afterDelay(): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, 30));
  await Promise.resolve();
}

describe('NotebookCellFooters', () => {
  it('asks /cell.json once per cell run, with the kernel-stamped span, and shows a footer only under a cell that touched a GPU', async () => {
    const a = cell('a');
    const c = cell('c');
    const { controller, asked, end } = footers([a, c], { a: BUSY, c: NO_GPU });
    end(span('a', 1));
    await afterDelay();
    end(span('c', 2));
    await afterDelay();
    expect(asked).toEqual([
      ['k1', '2026-12-05T12:00:00.1Z', '2026-12-05T12:00:41.3Z'],
      ['k1', '2026-12-05T12:00:00.1Z', '2026-12-05T12:00:41.3Z']
    ]);
    expect(controller.requests).toBe(2);
    expect(footerOf(a)?.node.textContent).toContain(BUSY.verdict);
    expect(footerOf(c)).toBeUndefined();
    // Every cell: the CPU-only one says so, with no new request.
    controller.mode = 'all';
    expect(footerOf(c)?.button.textContent).toBe('no GPU work');
    expect(controller.requests).toBe(2);
    // Off: no footer, and a run asks nothing.
    controller.mode = 'off';
    expect(footerOf(a)).toBeUndefined();
    end(span('a', 3));
    await afterDelay();
    expect(controller.requests).toBe(2);
  });

  it('asks nothing while the notebook is hidden, and once per cell when it is shown again', async () => {
    const a = cell('a');
    const { controller, asked, end } = footers(
      [a],
      { a: BUSY },
      {
        visible: false
      }
    );
    end(span('a', 1));
    controller.cellStarted('a');
    end(span('a', 2)); // run again while hidden: only the last run is asked about
    await afterDelay();
    expect(asked).toHaveLength(0);
    controller.visible = true;
    await afterDelay();
    expect(asked).toHaveLength(1);
    expect(footerOf(a)).toBeDefined();
    // Hidden during the wait before asking: put back, asked when shown.
    controller.cellStarted('a');
    end(span('a', 3));
    controller.visible = false;
    await afterDelay();
    expect(asked).toHaveLength(1);
    controller.visible = true;
    controller.visible = false;
    controller.visible = true;
    await afterDelay();
    expect(asked).toHaveLength(2);
  });

  it('asks nothing for GPU footers where the server said there is nothing to judge (no GPU), but does for every-cell footers', async () => {
    const a = cell('a');
    let stuck = true;
    const { controller, asked, end } = footers(
      [a],
      { a: NO_GPU },
      {
        nothingToJudge: () => stuck
      }
    );
    end(span('a', 1));
    await afterDelay();
    expect(asked).toHaveLength(0);
    controller.mode = 'all';
    end(span('a', 2));
    await afterDelay();
    expect(asked).toHaveLength(1);
    expect(footerOf(a)?.button.textContent).toBe('no GPU work');
    controller.mode = 'gpu';
    stuck = false;
    end(span('a', 3));
    await afterDelay();
    expect(asked).toHaveLength(2);
  });

  it('drops an answer about a run the cell has since replaced, and clears the old footer when it runs again', async () => {
    const a = cell('a');
    let release: (value: unknown) => void = () => undefined;
    const controller = new NotebookCellFooters({
      cells: () => [a],
      fetchReport: () => new Promise(resolve => (release = resolve)),
      open: () => undefined,
      visible: true,
      delayMs: 0
    });
    controller.cellEnded(span('a'));
    await afterDelay();
    controller.cellStarted('a');
    release(BUSY);
    await afterDelay();
    expect(footerOf(a)).toBeUndefined();
  });

  it('saves the footer into the notebook only when the setting asks, and shows a saved one again', async () => {
    const a = cell('a');
    const { controller, end } = footers([a], { a: BUSY });
    end(span('a', 4));
    await afterDelay();
    expect(a.metadata.has(CELL_METADATA_KEY)).toBe(false);
    controller.save = true;
    controller.cellStarted('a');
    end(span('a', 5));
    await afterDelay();
    const saved = a.metadata.get(CELL_METADATA_KEY) as Record<string, unknown>;
    expect(saved.count).toBe(5);
    // Reopened: a fresh notebook view shows the saved footer without asking.
    const reopened = cell('a');
    reopened.metadata.set(CELL_METADATA_KEY, JSON.parse(JSON.stringify(saved)));
    const again = footers([reopened], {});
    again.controller.restoreSaved();
    expect(footerOf(reopened)?.button.textContent).toBe(BUSY.verdict);
    expect(again.asked).toHaveLength(0);
    // Run again: the saved one is out of date, and goes.
    controller.cellStarted('a');
    expect(a.metadata.has(CELL_METADATA_KEY)).toBe(false);
  });
});

describe('CellGpuFooter', () => {
  it('is a button with the verdict, described by the figures and findings, that opens the span', () => {
    const opened: ITimeRange[] = [];
    const report = parseCellReport(BUSY)!;
    const footer = new CellGpuFooter({
      report,
      count: 12,
      open: range => opened.push(range)
    });
    Widget.attach(footer, document.body);
    expect(footer.hasClass(CELL_FOOTER_CLASS)).toBe(true);
    const button = footer.button;
    expect(button.tagName).toBe('BUTTON');
    expect(button.textContent).toBe(BUSY.verdict);
    const details = document.getElementById(
      button.getAttribute('aria-describedby') ?? ''
    );
    expect(details?.textContent).toContain('SM 87%');
    expect(details?.textContent).toContain('peak 12.3 GiB (+2.1 GiB)');
    const lines = Array.from(details?.children ?? [], d => d.textContent);
    expect(lines).toContain('GPU 1 waits on the host 12% of the time.');
    expect(lines).toContain('Try: prefetch the next batch.');
    // The notebook's shortcuts leave keys on the footer to the footer.
    expect(footer.node.hasAttribute('data-lm-suppress-shortcuts')).toBe(true);
    button.click();
    // ... and names the cell's GPUs, so the page shows those alone.
    expect(opened).toEqual([
      {
        start_s: BUSY.start_s,
        end_s: BUSY.end_s,
        label: 'cell [12]',
        gpus: ['GPU-1']
      }
    ]);
    // Escape closes the figures wherever the focus is (WCAG 1.4.13), until
    // the pointer and the focus have left the footer.
    if (!footer.isAttached) {
      Widget.attach(footer, document.body);
    }
    button.focus();
    const elsewhere = document.createElement('input');
    document.body.append(elsewhere);
    elsewhere.dispatchEvent(
      new KeyboardEvent('keydown', { key: 'Escape', bubbles: true })
    );
    expect(footer.hasClass('nvdashboard-mod-dismissed')).toBe(true);
    button.blur();
    expect(footer.hasClass('nvdashboard-mod-dismissed')).toBe(false);
    // Hovered only (no focus): Escape pressed with the focus in a cell.
    footer.node.dispatchEvent(new MouseEvent('mouseenter'));
    elsewhere.dispatchEvent(
      new KeyboardEvent('keydown', { key: 'Escape', bubbles: true })
    );
    expect(footer.hasClass('nvdashboard-mod-dismissed')).toBe(true);
    footer.node.dispatchEvent(new MouseEvent('mouseleave'));
    expect(footer.hasClass('nvdashboard-mod-dismissed')).toBe(false);
    elsewhere.remove();
    footer.dispose();
  });
});

describe('the cell report', () => {
  it('says where it was judged from, what cannot be told, and a lost GPU', () => {
    const report = parseCellReport({
      ...BUSY,
      judged_from: 'store',
      resolution_s: 60,
      gpus: [
        {
          ...BUSY.gpus[0],
          lost: true,
          signal: 'cannot-tell',
          sm_pct: null,
          working_share: null,
          findings: []
        }
      ]
    })!;
    const lines = cellDetailLines(report, null).join('\n');
    expect(lines).toContain(
      'judged from the history store, at 60 s resolution'
    );
    expect(lines).toContain('GPU work: cannot tell');
    expect(lines).toContain('GPU 1 disappeared during or after this cell.');
  });

  it('is not a report without a verdict and a span', () => {
    expect(parseCellReport({ verdict: 'x' })).toBeNull();
    expect(parseCellReport(null)).toBeNull();
  });
});

describe('cellGpus', () => {
  it("names every GPU of the cell's report by UUID, or none where one lacks it", () => {
    const two = parseCellReport({
      ...BUSY,
      gpus: [BUSY.gpus[0], { ...BUSY.gpus[0], index: 3, uuid: 'MIG-3' }]
    })!;
    expect(cellGpus(two)).toEqual({ gpus: ['GPU-1', 'MIG-3'] });
    // A footer saved before the UUID was kept: every GPU, none hidden.
    const old = parseCellReport({
      ...BUSY,
      gpus: [BUSY.gpus[0], { ...BUSY.gpus[0], index: 3, uuid: undefined }]
    })!;
    expect(cellGpus(old)).toEqual({});
    expect(cellGpus(parseCellReport(NO_GPU)!)).toEqual({});
  });
});
