import { TranslationBundle } from '@jupyterlab/translation';
import { MessageLoop } from '@lumino/messaging';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import {
  DIAGNOSIS_CLASS,
  IGlanceState,
  KERNEL_ROW_CLASS,
  parseGlance,
  statusText,
  statusTooltip,
  yourDevice
} from '../glance/glance';
import { GlanceModel } from '../glance/glanceModel';
import { GlancePanel } from '../glance/glancePanel';
import { GlanceStatusItem } from '../glance/statusItem';
import { FetchError } from '../shared/errors';
import { announcements, settled, waitFor } from './fakes';

const GIB = 2 ** 30;

const GLANCE = {
  devices: [
    {
      index: 0,
      label: 'GPU 0',
      kind: 'gpu',
      utilization_pct: 40,
      memory_used_bytes: 20 * GIB,
      memory_total_bytes: 80 * GIB
    },
    {
      index: 1,
      label: 'GPU 1',
      kind: 'gpu',
      utilization_pct: 80,
      memory_used_bytes: null,
      memory_total_bytes: 80 * GIB,
      mine: true
    }
  ],
  kernels: [
    {
      kernel_id: 'k1',
      path: 'work/a.ipynb',
      memory_bytes: 3 * GIB,
      memory_known: true,
      devices: ['GPU 0']
    }
  ]
};

const TWO_KERNELS = {
  ...GLANCE,
  kernels: [
    ...GLANCE.kernels,
    {
      kernel_id: 'k2',
      path: 'work/b.ipynb',
      memory_bytes: 5 * GIB,
      memory_known: true,
      devices: ['GPU 1']
    }
  ]
};

function ok(glance: unknown): IGlanceState {
  return {
    glance: parseGlance(glance),
    readAt: 0,
    error: null,
    failedAt: null
  };
}

/** A model whose answers come from a queue (the last one repeats); Errors reject. */
function model(
  answers: unknown[],
  options: Partial<GlanceModel.IOptions> = {}
): GlanceModel & { calls: number } {
  let calls = 0;
  const m = new GlanceModel({
    fetch: () => {
      const answer = answers[Math.min(calls++, answers.length - 1)];
      return answer instanceof Error
        ? Promise.reject(answer)
        : Promise.resolve(answer);
    },
    autoStart: false,
    ...options
  }) as GlanceModel & { calls: number };
  Object.defineProperty(m, 'calls', { get: () => calls });
  return m;
}

function panelFor(
  m: GlanceModel,
  options: Partial<GlancePanel.IOptions> = {}
): GlancePanel {
  const panel = new GlancePanel({
    model: m,
    confirm: () => Promise.resolve(true),
    shutdownKernel: () => Promise.resolve(),
    ...options
  });
  Widget.attach(panel, document.body);
  return panel;
}

/** A shown panel over a model that has answered once. */
async function shownPanel(
  answers: unknown[],
  options: Partial<GlancePanel.IOptions> = {}
): Promise<{ m: GlanceModel; panel: GlancePanel; close: () => void }> {
  const m = model(answers);
  const panel = panelFor(m, options);
  await settled(m.refresh());
  return { m, panel, close: () => (panel.dispose(), m.dispose()) };
}

function stopButton(panel: GlancePanel, id = 'k1'): HTMLButtonElement {
  return panel.node.querySelector(
    `[data-kernel-id="${id}"] .nvdashboard-kernel-shutdown`
  ) as HTMLButtonElement;
}

describe('parseGlance', () => {
  it('keeps well-formed devices and kernels and drops the rest', () => {
    const parsed = parseGlance({
      devices: [GLANCE.devices[0], { label: 3 }, null],
      kernels: [GLANCE.kernels[0], { path: 'x' }]
    });
    expect(parsed.devices.map(d => d.label)).toEqual(['GPU 0']);
    expect(parsed.kernels.map(k => k.kernel_id)).toEqual(['k1']);
    expect(parseGlance('junk')).toEqual({
      devices: [],
      kernels: [],
      diagnoses: [],
      reading_gpus: false,
      time: null
    });
  });

  it('turns non-numbers into not available', () => {
    const parsed = parseGlance({
      devices: [{ index: 0, label: 'GPU 0', utilization_pct: 'NaN' }]
    });
    expect(parsed.devices[0].utilization_pct).toBeNull();
  });
});

describe('statusText', () => {
  it('shows your GPU, not the busiest or the mean', () => {
    const glance = {
      devices: [
        { ...GLANCE.devices[0], utilization_pct: 100, mine: false },
        {
          ...GLANCE.devices[1],
          utilization_pct: 5,
          memory_used_bytes: 70 * GIB
        },
        { ...GLANCE.devices[0], index: 2, label: 'GPU 2', mine: true }
      ]
    };
    // The first GPU yours, by index, whichever is busier: it does not hop.
    expect(statusText(ok(glance))).toBe('GPU 1 5% · 70.0 GiB of 80.0 GiB');
    expect(yourDevice(parseGlance(glance))?.label).toBe('GPU 1');
    expect(statusText(null)).toBe('GPU –');
  });

  it('counts the free GPUs as the server judged them when none is yours', () => {
    const device = (index: number, free: unknown, utilization: number) => ({
      ...GLANCE.devices[0],
      index,
      label: `GPU ${index}`,
      utilization_pct: utilization,
      free,
      free_why: free ? 'free: no process holds it' : 'in use: utilization 99%'
    });
    const glance = {
      devices: [
        device(0, false, 99),
        device(1, true, 0),
        device(2, true, 3),
        device(3, 'yes', 0) // not a boolean: not free
      ]
    };
    expect(statusText(ok(glance))).toBe('2 of 4 GPUs free');
    const polls = [0, 1, 2].map(poll => ({
      devices: glance.devices.map(d => ({
        ...d,
        utilization_pct: (d.utilization_pct + 37 * poll) % 100
      }))
    }));
    // Utilization that moves every poll moves nothing in the text.
    expect(new Set(polls.map(g => statusText(ok(g)))).size).toBe(1);
    expect(statusText(ok({ devices: [device(0, true, 0)] }))).toBe(
      '1 of 1 GPU free'
    );
    expect(statusTooltip(ok(glance)).split('\n')).toContain(
      'GPU 1: 0% utilization, 20.0 GiB of 80.0 GiB memory (free)'
    );
  });

  it('shows each GPU when asked to', () => {
    expect(statusText(ok(GLANCE), 'each')).toBe('GPU 40% 80%');
  });

  it('says n/a rather than 0', () => {
    const glance = parseGlance({
      devices: [
        { index: 0, label: 'GPU 0', kind: 'gpu' },
        {
          index: 1,
          label: 'GPU 1',
          kind: 'gpu',
          memory_used_bytes: 1e9,
          memory_total_bytes: 2e9
        }
      ]
    });
    expect(statusText(ok(glance))).toBe('0 of 2 GPUs free');
    const none = {
      devices: [{ index: 0, label: 'GPU 0', kind: 'gpu', mine: true }]
    };
    expect(statusText(ok(none))).toBe('GPU 0 n/a · memory n/a');
  });

  it("says which reading it shows, as /GPU-Memory's hover does", () => {
    const at = new Date(2026, 11, 5, 9, 4, 7).getTime() / 1000;
    const tooltip = statusTooltip(ok({ ...GLANCE, time: at + 0.4 }));
    expect(tooltip.split('\n')).toContain('Reading of 09:04:07');
    expect(statusTooltip(ok(GLANCE))).not.toContain('Reading of');
  });

  it('has a tooltip line per GPU', () => {
    const tooltip = statusTooltip(ok(GLANCE)).split('\n');
    expect(tooltip).toContain(
      'GPU 0: 40% utilization, 20.0 GiB of 80.0 GiB memory'
    );
    expect(tooltip).toContain(
      'GPU 1: 80% utilization, n/a of 80.0 GiB memory (yours)'
    );
  });
});

const WHY = {
  ...GLANCE,
  diagnoses: [
    {
      index: 0,
      label: 'GPU 0',
      cause: 'launch-bound',
      brief: 'GPU 0: launch- or latency-bound, utilization 98%',
      line: 'GPU 0 launch- or latency-bound: utilization 98%, SM activity 12% over 60 samples and 12 GPM readings (GPM counters)',
      advice: 'launch fewer, bigger kernels: CUDA Graphs'
    },
    { index: 'x', line: 3 }
  ]
};

describe('diagnoses of the GPUs holding your kernels', () => {
  it('keeps well-formed diagnoses and puts them in the status tooltip', () => {
    const glance = parseGlance(WHY);
    expect(glance.diagnoses.map(d => d.cause)).toEqual(['launch-bound']);
    const tooltip = statusTooltip(ok(WHY));
    expect(tooltip).toContain('The GPUs of your kernels:');
    expect(tooltip).toContain(
      'GPU 0 launch- or latency-bound: utilization 98%'
    );
    expect(tooltip).toContain(
      'Try: launch fewer, bigger kernels: CUDA Graphs.'
    );
    expect(statusTooltip(ok(GLANCE))).not.toContain('your kernels');
  });

  it('shows them in the sidebar under the kernels, and the status item says them', async () => {
    const m = model([WHY]);
    const panel = panelFor(m);
    const item = new GlanceStatusItem({
      model: m,
      onActivate: () => undefined
    });
    await settled(m.refresh());
    const lines = panel.node.querySelectorAll(`.${DIAGNOSIS_CLASS} li`);
    expect(lines.length).toBe(1);
    expect((lines[0] as HTMLElement).dataset.cause).toBe('launch-bound');
    expect(lines[0].textContent).toContain('SM activity 12%');
    expect(lines[0].textContent).toContain('Try: launch fewer');
    expect(item.node.title).toContain('launch- or latency-bound');
    panel.dispose();
    m.dispose();
  });
});

describe("a GPU's finding told as the user's", () => {
  const finding = {
    index: 1,
    label: 'GPU 1',
    cause: 'starved',
    brief: 'GPU 1: starved, utilization 12%',
    line: 'GPU 1 starved: utilization 12% over 60 samples',
    advice: ''
  };

  it("tells an idle holder it is idle, names the GPU's other processes, and gives no advice", async () => {
    const glance = {
      ...GLANCE,
      diagnoses: [
        {
          ...finding,
          whose: 'gpu',
          your_kernels: ['work/a.ipynb'],
          idle_kernels: ['work/a.ipynb'],
          other_processes: 1,
          other_users: ['bob']
        }
      ]
    };
    const m = model([glance]);
    const panel = panelFor(m);
    await settled(m.refresh());
    const item = panel.node.querySelector(`.${DIAGNOSIS_CLASS} li`)!;
    expect(item.textContent).toContain(
      'Your work/a.ipynb is idle here: it holds GPU memory and does no GPU work'
    );
    expect(item.textContent).toContain(
      "The GPU's finding, with 1 other process (bob)."
    );
    expect(item.textContent).not.toContain('Try:');
    expect(item.querySelector('summary')!.getAttribute('title')).not.toContain(
      'Try:'
    );
    expect(panel.node.textContent).toContain(
      'Why the GPUs of your kernels are slow'
    );
    panel.dispose();
    m.dispose();
  });

  it("gives the advice where the user's working kernel is all that runs there", async () => {
    const glance = {
      ...GLANCE,
      diagnoses: [
        {
          ...finding,
          advice: 'find what the GPU waits for',
          whose: 'yours',
          your_kernels: ['work/a.ipynb'],
          idle_kernels: [],
          other_processes: 0,
          other_users: []
        }
      ]
    };
    const m = model([glance]);
    const panel = panelFor(m);
    await settled(m.refresh());
    const item = panel.node.querySelector(`.${DIAGNOSIS_CLASS} li`)!;
    expect(item.textContent).toContain(
      'About your work/a.ipynb: nothing else runs on this GPU.'
    );
    expect(item.textContent).toContain('Try: find what the GPU waits for.');
    panel.dispose();
    m.dispose();
  });
});

describe('GlanceStatusItem', () => {
  it('follows the model and opens the sidebar on click, Enter and Space', async () => {
    const m = model([GLANCE]);
    let opened = 0;
    const item = new GlanceStatusItem({ model: m, onActivate: () => opened++ });
    expect(item.node.textContent).toBe('GPU –');
    await settled(m.refresh());
    expect(item.node.textContent).toBe('GPU 1 80% · memory n/a');
    item.node.click();
    for (const key of ['Enter', ' ', 'a']) {
      item.node.dispatchEvent(
        new KeyboardEvent('keydown', { key, bubbles: true })
      );
    }
    expect(opened).toBe(3);
    m.dispose();
  });

  it('is a focusable button with a name, highlighted like JupyterLab items', () => {
    const item = new GlanceStatusItem({
      model: model([GLANCE]),
      onActivate: () => undefined
    });
    expect(item.node.tabIndex).toBe(0);
    expect(item.node.getAttribute('role')).toBe('button');
    expect(item.node.getAttribute('aria-label')).toContain(
      'Open the GPU dashboards'
    );
    expect(item.hasClass('jp-mod-highlighted')).toBe(true);
  });

  it('keeps its accessible name across polls, and changes it only with its state', async () => {
    let now = 1_000_000;
    const busier = {
      ...GLANCE,
      // GPU 1 is the user's, so the status text shows its figures.
      devices: [
        GLANCE.devices[0],
        { ...GLANCE.devices[1], utilization_pct: 95 }
      ]
    };
    const m = model(
      [
        GLANCE,
        busier,
        new TypeError('Failed to fetch'),
        new TypeError('Failed to fetch'),
        GLANCE
      ],
      { now: () => now }
    );
    const item = new GlanceStatusItem({
      model: m,
      onActivate: () => undefined
    });
    const seen: Array<[string, string]> = [];
    for (let i = 0; i < 5; i++) {
      now += 2000;
      await settled(m.refresh());
      seen.push([
        item.node.textContent ?? '',
        item.node.getAttribute('aria-label') ?? ''
      ]);
    }
    const text = seen.map(([t]) => t);
    const name = seen.map(([, n]) => n);
    // The figures (and the age) change at every poll; the name only when
    // live readings turn stale and back.
    expect(new Set(text.slice(0, 4)).size).toBe(4);
    expect(name[1]).toBe(name[0]);
    expect(name[2]).not.toBe(name[1]);
    expect(name[3]).toBe(name[2]);
    expect(name[4]).toBe(name[0]);
    expect(name[0]).toBe('GPU status: live. Open the GPU dashboards');
    expect(name[2]).toBe('GPU status: readings stale. Open the GPU dashboards');
    // The figures stay available to assistive technology, as the description.
    expect(item.node.title).toContain('GPU 1: 80% utilization');
    m.dispose();
  });

  it('is active only with a GPU and when the setting allows, and says when that changes', async () => {
    const m = model([{ devices: [] }, GLANCE]);
    const item = new GlanceStatusItem({
      model: m,
      onActivate: () => undefined
    });
    let changes = 0;
    item.activeStateChanged.connect(() => changes++);
    expect(item.isActive()).toBe(false);
    await settled(m.refresh());
    expect(item.isActive()).toBe(false); // no GPU on this machine
    await settled(m.refresh());
    expect(item.isActive()).toBe(true);
    item.enabled = false;
    expect(item.isActive()).toBe(false);
    expect(changes).toBe(2);
    m.dispose();
  });

  it('switches between your GPU and each GPU live', async () => {
    const m = model([GLANCE]);
    const item = new GlanceStatusItem({
      model: m,
      onActivate: () => undefined
    });
    await settled(m.refresh());
    item.figure = 'each';
    expect(item.node.textContent).toBe('GPU 40% 80%');
    m.dispose();
  });
});

describe('stale and unreachable', () => {
  it('says "stale" with the age of the last reading after a failed poll', async () => {
    let now = 1_000_000;
    const m = model([GLANCE, new TypeError('Failed to fetch')], {
      now: () => now
    });
    const panel = panelFor(m);
    const item = new GlanceStatusItem({
      model: m,
      onActivate: () => undefined
    });
    await settled(m.refresh());
    expect(item.node.textContent).not.toContain('stale');
    now += 7000;
    expect(await settled(m.refresh())).toBe('retry');
    expect(m.stale).toBe(true);
    expect(item.node.textContent).toBe(
      'GPU 1 80% · memory n/a · stale, read 7 s ago'
    );
    expect(item.node.title).toContain(
      'The dashboard server did not answer (Failed to fetch)'
    );
    expect(item.hasClass('nvdashboard-mod-stale')).toBe(true);
    const banner = panel.node.querySelector(
      '.nvdashboard-stale'
    ) as HTMLElement;
    expect(banner.hidden).toBe(false);
    expect(banner.querySelector('[role=status]')?.textContent).toContain(
      'stale'
    );
    expect(banner.textContent).toContain('stale, read 7 s ago');
    expect(panel.hasClass('nvdashboard-mod-stale')).toBe(true);
    // The age keeps counting on the next failure.
    now += 5000;
    expect(await settled(m.refresh())).toBe('retry');
    expect(banner.textContent).toContain('read 12 s ago');
    panel.dispose();
    m.dispose();
  });

  it('says "server unreachable" when there never was a reading', async () => {
    const m = model([new TypeError('Failed to fetch')]);
    const panel = panelFor(m);
    const item = new GlanceStatusItem({
      model: m,
      onActivate: () => undefined
    });
    expect(await settled(m.refresh())).toBe('retry');
    expect(item.node.textContent).toBe('GPU: server unreachable');
    expect(panel.node.textContent).toContain('server unreachable');
    panel.dispose();
    m.dispose();
  });

  it('retries within one interval after a success then a failure', async () => {
    // Pin Poll's random draw to the top of its range, as a bad day would.
    const random = jest.spyOn(Math, 'random').mockReturnValue(0.999);
    try {
      const answers: unknown[] = [
        GLANCE,
        GLANCE,
        new TypeError('Failed to fetch'),
        GLANCE
      ];
      const m = model(answers, {
        interval: 20,
        standby: 'never',
        autoStart: true
      });
      m.use('test', true);
      const waits: number[] = [];
      m.poller.poll.ticked.connect((_, state) => {
        if (state.phase !== 'started') {
          waits.push(state.interval);
        }
      });
      await waitFor(() => waits.length >= 4);
      // Lumino's backoff would wait up to 3 × the last interval; this waits one.
      expect(waits.slice(0, 4)).toEqual([20, 20, 20, 20]);
      m.dispose();
    } finally {
      random.mockRestore();
    }
  });

  it.each([
    ['a gateway error', new FetchError(502, 'Bad Gateway')],
    ['a server error', new FetchError(500, 'Internal Server Error')],
    ['no answer', new TypeError('Failed to fetch')]
  ])(
    'waits longer after each failed poll (%s), never less than the interval',
    async (_, failure) => {
      // A draw at the top of Poll's range is what once made it ask dozens of
      // times a second: after a tick that ran at once, Lumino's retry range
      // reached down to 1 ms.
      const random = jest.spyOn(Math, 'random').mockReturnValue(0.999);
      try {
        const m = model([failure], {
          interval: 10,
          retryMax: 200,
          stuckMax: 200,
          standby: 'never',
          autoStart: true
        });
        const waits: number[] = [];
        m.poller.poll.ticked.connect((_, state) => {
          if (state.phase !== 'started') {
            waits.push(state.interval);
          }
        });
        m.use('test', true);
        await waitFor(() => waits.length >= 4);
        const first = waits.slice(0, 4);
        expect(first[0]).toBe(10);
        first.slice(1).forEach((wait, i) => {
          expect(wait).toBeGreaterThan(first[i]);
        });
        expect(m.calls).toBe(waits.length);
        m.dispose();
      } finally {
        random.mockRestore();
      }
    }
  );
});

describe('render discipline', () => {
  it('emits only when the reading changed', async () => {
    const m = model([GLANCE, GLANCE, TWO_KERNELS]);
    let emitted = 0;
    m.changed.connect(() => emitted++);
    await settled(m.refresh());
    await settled(m.refresh());
    expect(emitted).toBe(1);
    await settled(m.refresh());
    expect(emitted).toBe(2);
    m.dispose();
  });

  it('keeps focus on "Shut down" across an identical update and a changed one', async () => {
    const changed = {
      ...TWO_KERNELS,
      kernels: [
        { ...TWO_KERNELS.kernels[0], memory_bytes: 4 * GIB },
        TWO_KERNELS.kernels[1]
      ]
    };
    const m = model([TWO_KERNELS, TWO_KERNELS, changed]);
    const panel = panelFor(m);
    await settled(m.refresh());
    const button = stopButton(panel, 'k2');
    button.focus();
    expect(document.activeElement).toBe(button);
    const renders = panel.renderCount;
    await settled(m.refresh()); // identical
    expect(panel.renderCount).toBe(renders);
    await settled(m.refresh()); // k1's memory changed
    expect(panel.renderCount).toBe(renders + 1);
    expect(stopButton(panel, 'k2')).toBe(button);
    expect(document.activeElement).toBe(button);
    expect(panel.node.textContent).toContain('4.0 GiB on GPU 0');
    panel.dispose();
    m.dispose();
  });

  it('draws once for the changes made in one go', async () => {
    const { panel, close } = await shownPanel([GLANCE]);
    const renders = panel.renderCount;
    // A reading, the local kernels and a shutdown's state, all at once.
    panel.invalidate();
    panel.invalidate();
    panel.invalidate();
    expect(panel.renderCount).toBe(renders);
    MessageLoop.flush();
    expect(panel.renderCount).toBe(renders + 1);
    close();
  });

  it('draws nothing while hidden and catches up when shown', async () => {
    const m = model([GLANCE, TWO_KERNELS]);
    const panel = panelFor(m);
    await settled(m.refresh());
    panel.hide();
    const renders = panel.renderCount;
    await settled(m.refresh());
    expect(panel.renderCount).toBe(renders);
    expect(panel.node.querySelectorAll(`.${KERNEL_ROW_CLASS}`).length).toBe(1);
    panel.show();
    expect(panel.renderCount).toBe(renders + 1);
    expect(panel.node.querySelectorAll(`.${KERNEL_ROW_CLASS}`).length).toBe(2);
    panel.dispose();
    m.dispose();
  });

  it('keeps one request in flight, and an older answer never overwrites a newer one', async () => {
    const pending: Array<(value: unknown) => void> = [];
    const m = new GlanceModel({
      fetch: () => new Promise(resolve => pending.push(resolve)),
      autoStart: false
    });
    const first = m.refresh(); // a poll tick, sent before the shutdown
    const second = m.refresh(); // the refresh after the shutdown
    const third = m.refresh();
    expect(second).toBe(third);
    await Promise.resolve();
    expect(pending.length).toBe(1);
    pending[0](TWO_KERNELS);
    await first;
    await waitFor(() => pending.length === 2);
    pending[1](GLANCE);
    await second;
    expect(m.glance?.kernels.map(k => k.kernel_id)).toEqual(['k1']);
    m.dispose();
  });

  it('applies a new interval live', async () => {
    const m = model([GLANCE], {
      interval: 60_000,
      standby: 'never',
      autoStart: true
    });
    m.use('test', true);
    await waitFor(() => m.calls === 1);
    m.interval = 10;
    expect(m.poller.poll.frequency.interval).toBe(10);
    await waitFor(() => m.calls >= 4);
    m.dispose();
  });
});

describe('GlancePanel', () => {
  it('puts "Your GPU kernels" first, as a heading, then one meter pair per device', async () => {
    const m = model([GLANCE]);
    const panel = panelFor(m);
    await settled(m.refresh());
    const headings = Array.from(panel.node.querySelectorAll('h3')).filter(
      h => !h.hidden
    );
    expect(headings.map(h => h.textContent)).toEqual([
      'Your GPU kernels',
      'GPUs now'
    ]);
    const kernelList = panel.node.querySelector('.nvdashboard-kernels')!;
    const devices = panel.node.querySelector('.nvdashboard-glance-devices')!;
    expect(
      kernelList.compareDocumentPosition(devices) &
        Node.DOCUMENT_POSITION_FOLLOWING
    ).toBeTruthy();
    const meters = panel.node.querySelectorAll('[role=meter]');
    expect(meters.length).toBe(4);
    expect((meters[0] as HTMLElement).dataset.value).toBe('40.0');
    expect(meters[0].getAttribute('aria-valuenow')).toBe('40');
    expect(meters[0].getAttribute('aria-valuemin')).toBe('0');
    expect(meters[0].getAttribute('aria-valuemax')).toBe('100');
    expect(meters[0].getAttribute('aria-label')).toBe('GPU 0 utilization');
    expect(meters[1].getAttribute('aria-valuetext')).toBe(
      '20.0 GiB of 80.0 GiB'
    );
    expect(meters[3].hasAttribute('aria-valuenow')).toBe(false); // not available
    expect(meters[3].getAttribute('aria-valuetext')).toBe('n/a of 80.0 GiB');
    // What fits on the bar: the used memory; the total is in its name and tooltip.
    expect(meters[1].textContent).toBe('20.0 GiB');
    const rows = panel.node.querySelectorAll(`.${KERNEL_ROW_CLASS}`);
    expect(rows.length).toBe(1);
    expect(rows[0].textContent).toContain('work/a.ipynb');
    expect(rows[0].textContent).toContain('3.0 GiB on GPU 0');
    panel.dispose();
    m.dispose();
  });

  it('says which reading its meters show, as the status bar does', async () => {
    const at = new Date(2026, 11, 5, 9, 4, 7).getTime() / 1000;
    const m = model([{ ...GLANCE, time: at + 0.4 }]);
    const panel = panelFor(m);
    await settled(m.refresh());
    const heading = Array.from(panel.node.querySelectorAll('h3')).find(
      h => !h.hidden && h.textContent?.startsWith('GPUs')
    );
    expect(heading?.textContent).toBe('GPUs, reading of 09:04:07');
    const meters = panel.node.querySelectorAll('[role=meter]');
    expect(meters[0].getAttribute('title')).toBe(
      'GPU 0 utilization: 40% (reading of 09:04:07)'
    );
    expect(meters[1].getAttribute('title')).toBe(
      'GPU 0 memory used: 20.0 GiB of 80.0 GiB (reading of 09:04:07)'
    );
    // The screen reader's value is the figure alone.
    expect(meters[1].getAttribute('aria-valuetext')).toBe(
      '20.0 GiB of 80.0 GiB'
    );
    panel.dispose();
    m.dispose();
  });

  it('says what a kernel holds as the driver reports it, never 0 B for held memory', async () => {
    const kernel = (fields: Record<string, unknown>, id: string) => ({
      kernel_id: id,
      path: `work/${id}.ipynb`,
      devices: ['GPU 0'],
      ...fields
    });
    const m = model([
      {
        ...GLANCE,
        kernels: [
          kernel({ memory_bytes: 3 * GIB, memory_known: true }, 'own'),
          kernel({ memory_bytes: 2 * GIB, memory_known: false }, 'part'),
          // Another PID namespace: the driver reports its container's processes together.
          kernel(
            {
              memory_bytes: 0,
              memory_known: false,
              shared_memory_bytes: 6 * GIB
            },
            'shared'
          ),
          kernel({ memory_bytes: 0, memory_known: false }, 'unreported')
        ]
      }
    ]);
    const panel = panelFor(m);
    await settled(m.refresh());
    const rows = Array.from(
      panel.node.querySelectorAll(`.${KERNEL_ROW_CLASS}`),
      row => row.textContent ?? ''
    );
    expect(rows).toHaveLength(4);
    const row = (id: string) => rows.find(text => text.includes(`${id}.ipynb`));
    expect(row('own')).toContain('3.0 GiB on GPU 0');
    expect(row('part')).toContain('at least 2.0 GiB on GPU 0');
    expect(row('shared')).toContain('6.0 GiB shared on GPU 0');
    expect(row('unreported')).toContain('memory not reported on GPU 0');
    expect(rows.join(' ')).not.toContain('0 B');
    panel.dispose();
    m.dispose();
  });

  it('gives every button a name of its own', async () => {
    const m = model([TWO_KERNELS]);
    const panel = panelFor(m);
    await settled(m.refresh());
    const names = Array.from(panel.node.querySelectorAll('button')).map(b =>
      b.getAttribute('aria-label')
    );
    expect(names).toEqual([
      'Open work/a.ipynb',
      'Shut down the kernel of work/a.ipynb',
      'Open work/b.ipynb',
      'Shut down the kernel of work/b.ipynb'
    ]);
    panel.dispose();
    m.dispose();
  });

  it('shuts a kernel down only after confirmation, then refreshes', async () => {
    const after = { ...GLANCE, kernels: [] };
    const m = model([GLANCE, GLANCE, after]);
    const stopped: string[] = [];
    let answer = false;
    const panel = panelFor(m, {
      confirm: () => Promise.resolve(answer),
      shutdownKernel: id => {
        stopped.push(id);
        return Promise.resolve();
      }
    });
    await settled(m.refresh());
    stopButton(panel).click();
    await new Promise(resolve => setTimeout(resolve, 10));
    expect(stopped).toEqual([]); // declined
    await settled(m.refresh());
    answer = true;
    stopButton(panel).click();
    await waitFor(() => stopped.length === 1 && m.calls === 3);
    expect(stopped).toEqual(['k1']);
    await waitFor(
      () => panel.node.querySelectorAll(`.${KERNEL_ROW_CLASS}`).length === 0
    );
    panel.dispose();
    m.dispose();
  });

  it('shows the error dialog when a shutdown fails, and enables the button again', async () => {
    const m = model([GLANCE]);
    const errors: Array<[string, unknown]> = [];
    const refused = new Error('403 Forbidden');
    const panel = panelFor(m, {
      shutdownKernel: () => Promise.reject(refused),
      showError: (title, error) => {
        errors.push([title, error]);
      }
    });
    await settled(m.refresh());
    stopButton(panel).click();
    await waitFor(() => errors.length === 1);
    expect(errors[0]).toEqual([
      'Could not shut down the kernel of work/a.ipynb',
      refused
    ]);
    expect(stopButton(panel).disabled).toBe(false);
    expect(stopButton(panel).textContent).toBe('Shut down');
    panel.dispose();
    m.dispose();
  });

  it('offers "Shut down" only for kernels this Jupyter server runs', async () => {
    const m = model([TWO_KERNELS]);
    const local = new Set(['k2']);
    const changed = new Signal<object, void>({});
    const panel = panelFor(m, {
      isLocalKernel: id => local.has(id),
      localKernelsChanged: changed
    });
    await settled(m.refresh());
    expect(stopButton(panel, 'k1').hidden).toBe(true);
    expect(
      panel.node.querySelector('[data-kernel-id="k1"]')!.textContent
    ).toContain('runs under another Jupyter server');
    expect(stopButton(panel, 'k2').hidden).toBe(false);
    local.add('k1');
    changed.emit();
    MessageLoop.flush(); // drawn at the next frame
    expect(stopButton(panel, 'k1').hidden).toBe(false);
    panel.dispose();
    m.dispose();
  });

  it('speaks the translator’s language', async () => {
    const bundle = {
      __: (msgid: string, ...args: unknown[]) =>
        `«${args.reduce<string>((s, a, i) => s.replace(`%${i + 1}`, String(a)), msgid)}»`,
      _n: (one: string, many: string, n: number) =>
        `«${(n === 1 ? one : many).replace('%1', String(n))}»`
    } as unknown as TranslationBundle;
    const m = model([GLANCE]);
    const panel = panelFor(m, { trans: bundle });
    await settled(m.refresh());
    expect(panel.node.textContent).toContain('«Your GPU kernels»');
    expect(panel.node.textContent).toContain('«Shut down»');
    panel.dispose();
    m.dispose();
  });

  it('gives each GPU one short line, the whole finding on hover and a click away', async () => {
    const { panel, close } = await shownPanel([WHY]);
    const brief = panel.node.querySelector(
      `.${DIAGNOSIS_CLASS} summary`
    ) as HTMLElement;
    expect(brief.textContent).toBe(
      'GPU 0: launch- or latency-bound, utilization 98%'
    );
    expect(brief.title).toContain('SM activity 12% over 60 samples');
    expect(brief.title).toContain('Try: launch fewer, bigger kernels');
    const details = brief.parentElement as HTMLDetailsElement;
    expect(details.tagName).toBe('DETAILS');
    expect(details.open).toBe(false);
    expect(details.textContent).toContain('GPM counters');
    close();
  });

  it('moves the keyboard to the next row when a kernel is shut down', async () => {
    const three = {
      ...TWO_KERNELS,
      kernels: [
        ...TWO_KERNELS.kernels,
        { ...TWO_KERNELS.kernels[1], kernel_id: 'k3', path: 'work/c.ipynb' }
      ]
    };
    const after = {
      ...three,
      kernels: three.kernels.filter(k => k.kernel_id !== 'k2')
    };
    const m = model([three, after]);
    const panel = panelFor(m, {
      // The dialog takes the keyboard, as JupyterLab's does.
      confirm: () => {
        (document.activeElement as HTMLElement | null)?.blur();
        return Promise.resolve(true);
      }
    });
    await settled(m.refresh());
    const button = stopButton(panel, 'k2');
    button.focus();
    button.click();
    await waitFor(
      () => panel.node.querySelector('[data-kernel-id="k2"]') === null
    );
    expect(document.activeElement).toBe(stopButton(panel, 'k3'));
    panel.dispose();
    m.dispose();
  });
});

describe('live regions', () => {
  it('speak when readings go stale, not at every failed poll', async () => {
    let now = 1_000_000;
    const failed = new TypeError('Failed to fetch');
    const m = model([GLANCE, failed, failed, failed, GLANCE], {
      now: () => now
    });
    const panel = panelFor(m);
    await settled(m.refresh());
    const live = panel.node.querySelector(
      '.nvdashboard-stale [role=status]'
    ) as HTMLElement;
    const { said, stop } = announcements(live);
    for (let i = 0; i < 3; i++) {
      now += 2000;
      await settled(m.refresh());
    }
    await Promise.resolve(); // MutationObserver callbacks are microtasks
    expect(said.length).toBe(1); // once, when they went stale
    expect(panel.node.textContent).toContain('read 6 s ago'); // the age still counts
    now += 2000;
    await settled(m.refresh());
    await Promise.resolve();
    expect(said.length).toBe(2); // and once when the server answers again
    stop();
    panel.dispose();
    m.dispose();
  });
});

describe('the glance poll runs only while something shows it', () => {
  function counting(answer: unknown): {
    m: GlanceModel;
    calls: () => number;
  } {
    let calls = 0;
    const m = new GlanceModel({
      fetch: () => {
        calls++;
        return answer instanceof Error
          ? Promise.reject(answer)
          : Promise.resolve(answer);
      },
      interval: 10,
      standby: 'never'
    });
    return { m, calls: () => calls };
  }

  it('asks nothing with the status item off and the sidebar closed', async () => {
    const { m, calls } = counting(GLANCE);
    const item = new GlanceStatusItem({
      model: m,
      onActivate: () => undefined,
      enabled: false
    });
    const panel = new GlancePanel({
      model: m,
      confirm: () => Promise.resolve(true),
      shutdownKernel: () => Promise.resolve()
    }); // built, never shown: the sidebar is closed
    await new Promise(resolve => setTimeout(resolve, 100));
    expect(calls()).toBe(0);
    // Shown: it polls; hidden again: it stops.
    Widget.attach(panel, document.body);
    await waitFor(() => calls() >= 2);
    panel.hide();
    await new Promise(resolve => setTimeout(resolve, 30));
    const stopped = calls();
    await new Promise(resolve => setTimeout(resolve, 100));
    expect(calls()).toBeLessThanOrEqual(stopped + 1);
    // The status item turned on: it polls again.
    item.enabled = true;
    await waitFor(() => calls() >= stopped + 3);
    item.dispose();
    panel.dispose();
    m.dispose();
  });

  it('polls as often as its most demanding user needs, never more often than its interval', () => {
    const { m } = counting(GLANCE);
    m.interval = 2000;
    const pace = (): number => m.poller.poll.frequency.interval;
    m.use('notice', true, 60_000);
    expect([m.currentInterval, pace()]).toEqual([60_000, 60_000]);
    m.use('sidebar', true);
    expect([m.currentInterval, pace()]).toEqual([2000, 2000]);
    m.use('eager', true, 5);
    expect(m.currentInterval).toBe(2000);
    m.use('eager', false);
    m.use('sidebar', false);
    expect([m.currentInterval, pace()]).toEqual([60_000, 60_000]);
    // The refresh rate changes: a user that named none follows it.
    m.use('sidebar', true);
    m.interval = 5000;
    expect([m.currentInterval, pace()]).toEqual([5000, 5000]);
    m.use('notice', false);
    m.use('sidebar', false);
    expect(m.poller.running).toBe(false);
    m.dispose();
  });

  it('waits longer each time on a 404, and on a machine with no GPU stops for the status item', async () => {
    for (const answer of [
      new FetchError(404, 'GET glance.json answered 404 Not Found'),
      { devices: [], reading_gpus: false }
    ]) {
      const { m, calls } = counting(answer);
      const waits: number[] = [];
      m.poller.poll.ticked.connect((_, state) => {
        if (state.phase !== 'started') {
          waits.push(state.interval);
        }
      });
      m.use('sidebar', true);
      await waitFor(() => waits.length >= 4);
      // The interval, then twice as long each time.
      expect(waits.slice(0, 4)).toEqual([10, 20, 40, 80]);
      expect(m.poller.poll.frequency.max).toBeGreaterThanOrEqual(60_000);
      m.use('sidebar', false);
      const item = new GlanceStatusItem({
        model: m,
        onActivate: () => undefined
      });
      // Nothing to show and nothing that will change by itself: the item
      // does not keep the poll (and the dashboard server) awake.
      expect(item.needsGlance).toBe(false);
      expect(m.poller.running).toBe(false);
      const before = calls();
      await new Promise(resolve => setTimeout(resolve, 100));
      expect(calls()).toBeLessThanOrEqual(before + 1);
      item.dispose();
      m.dispose();
    }
  });

  it('asks again at the interval, not backing off, while the server is still reading its GPUs', async () => {
    const m = model([{ devices: [], reading_gpus: true }]);
    expect(await settled(m.refresh())).toBe('ok');
    expect(m.stuck).toBe(false);
    m.dispose();
  });
});
