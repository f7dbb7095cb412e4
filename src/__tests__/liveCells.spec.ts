/**
 * A running cell's live footer and the running cell notice (issue 55): the
 * glance's report so far shown under the cell the kernel runs, with its
 * figures now, never while the notebook is hidden, replaced by the finished
 * footer; the notice once per run, after the set time, and only where the
 * server named a cause.
 */
import { Signal } from '@lumino/signaling';

import {
  ILiveSource,
  LIVE_INTERVAL_MS,
  NotebookCellFooters
} from '../cells/notebookFooters';
import { RUNNING_CLASS } from '../cells/cellFooter';
import { IRunningCell } from '../cells/cellSpans';
import { NOTICE_INTERVAL_MS } from '../idle/noticePace';
import { LiveCellNotices } from '../cells/liveCellNotice';
import { ITimeRange } from '../shared/tokens';
import { cell, footerOf } from './fakes';

const GIB = 2 ** 30;
const START = '2026-12-05T12:00:00.123456Z';
const START_S = Date.parse(START) / 1000 + 0.000456;

/** `/cell.json`'s answer so far, as the glance carries it. */
function soFar(
  seconds: number,
  state: string,
  verdict: string,
  notice: string | null = null
) {
  return {
    kernel: 'k1',
    notebook: 'train.ipynb',
    start_s: START_S,
    end_s: START_S + seconds,
    duration_s: seconds,
    running: true,
    held_s: seconds,
    notice,
    count: 7,
    judged_from: 'memory',
    resolution_s: 0.2,
    too_short: false,
    touched_gpu: true,
    state,
    gpus: [
      {
        index: 1,
        label: 'GPU 1',
        uuid: 'GPU-1',
        mig: null,
        lost: false,
        memory: {
          start_bytes: 0,
          end_bytes: 12 * GIB,
          peak_bytes: 12 * GIB,
          change_bytes: 12 * GIB
        },
        signal: 'per-process',
        sm_pct: 87,
        working_share: 1,
        findings: []
      }
    ],
    verdict
  };
}

/** The glance model as the footers read it; the test sets what it says. */
class FakeGlance implements ILiveSource {
  glance: ILiveSource['glance'] = null;
  changed = new Signal<unknown, unknown>(this);
  users = new Map<unknown, number>();

  use(user: unknown, inUse: boolean, intervalMs?: number): void {
    if (inUse) {
      this.users.set(user, intervalMs ?? 0);
    } else {
      this.users.delete(user);
    }
  }

  say(report: unknown, ownPct: number | null = 87, time = START_S + 10): void {
    this.glance = {
      time,
      kernels: [
        {
          kernel_id: 'k1',
          path: 'train.ipynb',
          memory_bytes: 12 * GIB,
          own_pct: ownPct,
          cell: report
        }
      ]
    };
    this.changed.emit(undefined);
  }
}

const RUN: IRunningCell = {
  kernelId: 'k1',
  cellId: 'a',
  count: 7,
  start: START
};

describe('live cell footers', () => {
  it('shows the running cell so far under its cell, with its figures now, and reads the glance at the live pace only while it runs', () => {
    const a = cell('a');
    const live = new FakeGlance();
    const footers = new NotebookCellFooters({
      cells: () => [a],
      fetchReport: async () => ({}),
      open: () => undefined,
      visible: true,
      live
    });
    expect(live.users.size).toBe(0);
    footers.cellRunning(RUN);
    expect(live.users.get(footers)).toBe(LIVE_INTERVAL_MS);
    live.say(
      soFar(9, 'busy', 'GPU 1: busy 100% of 9 s, peak 12.0 GiB (+12.0)')
    );
    const busy = footerOf(a)!;
    expect(busy.hasClass(RUNNING_CLASS)).toBe(true);
    expect(busy.button.textContent).toBe(
      'running 10 s · GPU 1: 12.0 GiB now, peak 12.0 GiB · working 87% now · so far: GPU 1: busy 100% of 9 s, peak 12.0 GiB (+12.0)'
    );
    expect(busy.node.textContent).toContain('Cell [7] runs since');
    // The same report again (a glance message that changes nothing the footer
    // says): nothing is written, and the footer is the same widget.
    const writes = new MutationObserver(() => undefined);
    writes.observe(busy.node, {
      subtree: true,
      childList: true,
      characterData: true,
      attributes: true
    });
    live.say(
      soFar(9, 'busy', 'GPU 1: busy 100% of 9 s, peak 12.0 GiB (+12.0)')
    );
    expect(writes.takeRecords()).toEqual([]);
    expect(footerOf(a)).toBe(busy);
    writes.disconnect();
    // The kernel idles: the work now says so at once, the verdict as judged.
    live.say(
      soFar(
        40,
        'held-idle',
        'held 12.0 GiB on GPU 1, but this cell worked it 25% of 40 s'
      ),
      0,
      START_S + 41
    );
    expect(footerOf(a)!.button.textContent).toBe(
      'running 41 s · GPU 1: 12.0 GiB now, peak 12.0 GiB · working 0% now · so far: held 12.0 GiB on GPU 1, but this cell worked it 25% of 40 s'
    );
    // Updated in place: the keyboard's focus on the button stays.
    expect(footerOf(a)).toBe(busy);
    // Hidden: not read, not drawn.
    footers.visible = false;
    expect(live.users.size).toBe(0);
    const shown = footerOf(a);
    live.say(soFar(50, 'held-idle', 'later'), 0, START_S + 51);
    expect(footerOf(a)).toBe(shown);
    // Shown again: the glance now.
    footers.visible = true;
    expect(footerOf(a)!.button.textContent).toContain('so far: later');
    // Ended: no longer read; the finished footer takes its place when asked.
    footers.cellEnded({ ...RUN, end: '2026-12-05T12:01:00Z' });
    expect(live.users.size).toBe(0);
    footers.dispose();
  });

  it("shows nothing for another cell's run of the kernel, a finished report, after a restart, or with footers off", () => {
    const a = cell('a');
    const live = new FakeGlance();
    const footers = new NotebookCellFooters({
      cells: () => [a],
      fetchReport: async () => ({}),
      open: () => undefined,
      visible: true,
      live
    });
    footers.cellRunning({ ...RUN, start: '2026-12-05T12:00:05Z' });
    live.say(soFar(9, 'busy', 'GPU 1: busy'));
    expect(footerOf(a)).toBeUndefined();
    live.say({ ...soFar(9, 'busy', 'GPU 1: busy'), running: false });
    footers.cellRunning(RUN);
    expect(footerOf(a)).toBeUndefined();
    // A restart ends the run with no reply: its live footer goes.
    live.say(soFar(9, 'busy', 'GPU 1: busy'));
    expect(footerOf(a)!.hasClass(RUNNING_CLASS)).toBe(true);
    footers.kernelGone();
    expect(footerOf(a)).toBeUndefined();
    expect(live.users.size).toBe(0);
    footers.cellRunning(RUN);
    footers.mode = 'off';
    expect(live.users.size).toBe(0);
    live.say(soFar(9, 'busy', 'GPU 1: busy'));
    expect(footerOf(a)).toBeUndefined();
    footers.dispose();
  });
});

describe('LiveCellNotices', () => {
  it('tells once per cell run, after the set time, where the server named a cause, with a button that opens the span so far', () => {
    const live = new FakeGlance();
    const told: Array<[string, string[]]> = [];
    const opened: ITimeRange[] = [];
    let actions: Array<{ label: string; callback: () => void }> = [];
    const notices = new LiveCellNotices({
      model: live,
      notify: (message, given) => {
        told.push([message, given.map(a => a.label)]);
        actions = given;
      },
      open: range => opened.push(range)
    });
    expect(live.users.size).toBe(0); // off until the settings say
    notices.settings = { enabled: true, minutes: 5 };
    expect(live.users.get(notices)).toBe(NOTICE_INTERVAL_MS);
    const idle = (seconds: number, notice: string | null) =>
      soFar(
        seconds,
        'held-idle',
        'held 12.0 GiB on GPU 1, but this cell worked it 3% of it',
        notice
      );
    live.say(idle(299, 'held-idle'));
    live.say(idle(400, null)); // shared: the server names no cause
    expect(told).toEqual([]);
    live.say(idle(301, 'held-idle'));
    live.say(idle(361, 'held-idle'));
    expect(told).toEqual([
      [
        'train.ipynb, cell [7] has held GPU 1 for 5 min 01 s and barely used it.',
        ['Open GPU Activity']
      ]
    ]);
    actions[0].callback();
    expect(opened).toEqual([
      {
        start_s: START_S,
        end_s: START_S + 301,
        label: 'cell [7]',
        gpus: ['GPU-1']
      }
    ]);
    // Off: reads nothing and says nothing.
    notices.settings = { enabled: false, minutes: 5 };
    expect(live.users.size).toBe(0);
    live.say({ ...idle(500, 'starved'), start_s: START_S + 1000 });
    expect(told.length).toBe(1);
    notices.dispose();
  });
});
