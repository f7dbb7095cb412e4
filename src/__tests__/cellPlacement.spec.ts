/**
 * Issue 53: the footer is always under its own cell and its own run. A
 * saved footer reopens under its cell (after the cell renders), a cell
 * queued twice shows no footer of its first run while the second runs, two
 * views of one notebook ask once per run, and a Lab has at most a few
 * `/cell.json` requests in flight.
 */
import { Signal } from '@lumino/signaling';
import { PanelLayout, Widget } from '@lumino/widgets';

import {
  CELL_METADATA_KEY,
  IFooterCell,
  NotebookCellFooters
} from '../cells/notebookFooters';
import { CellGpuFooter } from '../cells/cellFooter';
import {
  CELL_REQUESTS_IN_FLIGHT,
  CellReportRequests
} from '../cells/cellRequests';
import {
  CellSpanWatcher,
  ICellSpan,
  IKernelMessageLike
} from '../cells/cellSpans';

const REPORT = {
  kernel: 'k1',
  notebook: 'a.ipynb',
  start_s: 10,
  end_s: 20,
  duration_s: 10,
  judged_from: 'memory',
  resolution_s: 0.2,
  too_short: false,
  touched_gpu: true,
  gpus: [],
  verdict: 'held 6.0 GiB on GPU 0; this cell did no GPU work'
};

class FakeKernel {
  id = 'k1';
  anyMessage = new Signal<
    unknown,
    { msg: IKernelMessageLike; direction: 'send' | 'recv' }
  >(this);
  private _serial = 0;

  request(cellId: string): string {
    const id = `req-${++this._serial}`;
    this.anyMessage.emit({
      direction: 'send',
      msg: {
        header: { msg_id: id, msg_type: 'execute_request', date: '' },
        parent_header: {},
        metadata: { cellId },
        content: {}
      }
    });
    return id;
  }

  answer(parent: string, type: string, date: string): void {
    this.anyMessage.emit({
      direction: 'recv',
      msg: {
        header: { msg_id: `m-${++this._serial}`, msg_type: type, date },
        parent_header: { msg_id: parent },
        metadata: {},
        content: { execution_count: this._serial }
      }
    });
  }

  run(request: string, start: string, end: string): void {
    this.answer(request, 'execute_input', start);
    this.answer(request, 'execute_reply', end);
  }
}

/** A cell whose input JupyterLab adds on its first render (`ready`). */
function lazyCell(id: string, metadata: Map<string, unknown>) {
  const widget = new Widget();
  const layout = new PanelLayout();
  widget.layout = layout;
  let render = () => {};
  const ready = new Promise<void>(resolve => {
    render = () => {
      layout.addWidget(
        new Widget({ node: document.createElement('textarea') })
      );
      resolve();
    };
  });
  Object.assign(widget, {
    ready,
    model: {
      id,
      getMetadata: (key: string) => metadata.get(key),
      setMetadata: (key: string, value: unknown) => metadata.set(key, value),
      deleteMetadata: (key: string) => metadata.delete(key)
    }
  });
  return { cell: widget as unknown as IFooterCell, layout, render };
}

async function settle(ms = 30): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, ms));
  await Promise.resolve();
}

describe('footer placement', () => {
  it('puts a saved footer under its cell once the cell has rendered, not above its input', async () => {
    const metadata = new Map<string, unknown>([
      [CELL_METADATA_KEY, { report: REPORT, count: 3 }]
    ]);
    const { cell, layout, render } = lazyCell('a', metadata);
    const footers = new NotebookCellFooters({
      cells: () => [cell],
      fetchReport: async () => REPORT,
      open: () => undefined,
      visible: true
    });
    footers.restoreSaved();
    await settle(0);
    expect(layout.widgets.some(w => w instanceof CellGpuFooter)).toBe(false);
    render();
    await settle(0);
    const last = layout.widgets[layout.widgets.length - 1];
    expect(last).toBeInstanceOf(CellGpuFooter);
    expect(layout.widgets[0]).not.toBeInstanceOf(CellGpuFooter);
  });

  it("shows no footer of a cell's first run while its second, queued, still runs", async () => {
    const kernel = new FakeKernel();
    const watcher = new CellSpanWatcher(kernel);
    const metadata = new Map<string, unknown>();
    const { cell, layout, render } = lazyCell('a', metadata);
    render();
    const asked: string[] = [];
    const footers = new NotebookCellFooters({
      cells: () => [cell],
      fetchReport: async (_, start) => {
        asked.push(start);
        return REPORT;
      },
      open: () => undefined,
      visible: true,
      save: true,
      delayMs: 5
    });
    const ended: ICellSpan[] = [];
    watcher.started.connect((_, id) => footers.cellStarted(id));
    watcher.ended.connect((_, span) => {
      ended.push(span);
      footers.cellEnded(span);
    });
    const first = kernel.request('a');
    const second = kernel.request('a'); // queued twice
    kernel.run(first, '2026-12-05T12:00:00Z', '2026-12-05T12:00:01Z');
    await settle();
    expect(ended[0].superseded).toBe(true);
    expect(asked).toEqual([]);
    expect(layout.widgets.some(w => w instanceof CellGpuFooter)).toBe(false);
    expect(metadata.has(CELL_METADATA_KEY)).toBe(false); // nothing saved either
    kernel.run(second, '2026-12-05T12:00:01Z', '2026-12-05T12:00:09Z');
    await settle();
    expect(ended[1].superseded).toBeUndefined();
    expect(asked).toEqual(['2026-12-05T12:00:01Z']);
    expect(layout.widgets.some(w => w instanceof CellGpuFooter)).toBe(true);
  });

  it('is not fooled by an old request never answered (a kernel restarted mid-run)', () => {
    const kernel = new FakeKernel();
    const watcher = new CellSpanWatcher(kernel);
    const ended: ICellSpan[] = [];
    watcher.ended.connect((_, span) => ended.push(span));
    kernel.request('a'); // lost with the kernel
    const again = kernel.request('a');
    kernel.run(again, '2026-12-05T12:01:00Z', '2026-12-05T12:01:02Z');
    expect(ended).toHaveLength(1);
    expect(ended[0].superseded).toBeUndefined();
  });
});

describe('CellReportRequests', () => {
  it('asks once per span however many views ask', async () => {
    let sent = 0;
    const requests = new CellReportRequests(async () => {
      sent++;
      return REPORT;
    });
    const [one, two] = await Promise.all([
      requests.fetch('k1', 'a', 'b'),
      requests.fetch('k1', 'a', 'b')
    ]);
    expect(one).toBe(two);
    await requests.fetch('k1', 'a', 'b'); // a view shown again later
    expect(sent).toBe(1);
    await requests.fetch('k1', 'a', 'c');
    expect(sent).toBe(2);
  });

  it('keeps at most a few requests in flight, the rest in the order asked', async () => {
    const pending: Array<() => void> = [];
    const order: string[] = [];
    let most = 0;
    let now = 0;
    const requests = new CellReportRequests(
      (_, start) =>
        new Promise(resolve => {
          order.push(start);
          now++;
          most = Math.max(most, now);
          pending.push(() => {
            now--;
            resolve(REPORT);
          });
        })
    );
    const answers = Array.from({ length: 300 }, (_, i) =>
      requests.fetch('k1', String(i), 'end')
    );
    await settle(0);
    expect(requests.inFlight).toBe(CELL_REQUESTS_IN_FLIGHT);
    while (pending.length) {
      pending.shift()!();
      await settle(0);
    }
    await Promise.all(answers);
    expect(most).toBe(CELL_REQUESTS_IN_FLIGHT);
    expect(order).toEqual(Array.from({ length: 300 }, (_, i) => String(i)));
    expect(requests.sent).toBe(300);
  });

  it('asks again after a failure', async () => {
    let calls = 0;
    const requests = new CellReportRequests(async () => {
      calls++;
      if (calls === 1) {
        throw new Error('502');
      }
      return REPORT;
    });
    await expect(requests.fetch('k1', 'a', 'b')).rejects.toThrow('502');
    await expect(requests.fetch('k1', 'a', 'b')).resolves.toBe(REPORT);
    expect(calls).toBe(2);
  });
});
