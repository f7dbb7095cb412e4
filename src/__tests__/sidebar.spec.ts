import { CommandRegistry } from '@lumino/commands';
import { MessageLoop } from '@lumino/messaging';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { FetchError } from '../shared/errors';
import { DashboardSidebar } from '../dashboards/sidebar';
import {
  COMMAND_OPEN,
  DashboardIndex,
  STATUS_DETAIL_CLASS,
  STATUS_MIG_CLASS
} from '../shared/tokens';
import {
  announcements,
  DEFAULT_INFO,
  FakeFetcher,
  settled,
  waitFor
} from './fakes';

const LOADING_TEXT = 'Starting the dashboard server…';

const INDEX = {
  '/GPU-Utilization': 'GPU Utilization',
  '/GPU-Memory': 'GPU Memory',
  '/Machine-Resources': 'Machine Resources'
};

describe('DashboardSidebar', () => {
  let commands: CommandRegistry;
  let opened: Array<{ [key: string]: unknown }>;
  let sidebar: DashboardSidebar | null;

  function make(
    fetcher: FakeFetcher,
    options: Partial<DashboardSidebar.IOptions> = {}
  ): DashboardSidebar {
    sidebar = new DashboardSidebar({
      fetcher,
      commands,
      autoStart: false,
      standby: 'never',
      ...options
    });
    Widget.attach(sidebar, document.body);
    return sidebar;
  }

  function buttons(widget: DashboardSidebar): HTMLButtonElement[] {
    return Array.from(
      widget.node.querySelectorAll<HTMLButtonElement>(
        'button.nvdashboard-button'
      )
    );
  }

  /** Each tick of the sidebar's poll from now on: its phase and next interval. */
  function recordTicks(widget: DashboardSidebar): Array<[string, number]> {
    const ticks: Array<[string, number]> = [];
    widget.poll.ticked.connect((_, state) => {
      ticks.push([state.phase, state.interval]);
    });
    return ticks;
  }

  function text(widget: DashboardSidebar): string {
    return widget.node.textContent ?? '';
  }

  beforeEach(() => {
    commands = new CommandRegistry();
    opened = [];
    commands.addCommand(COMMAND_OPEN, {
      execute: args => {
        opened.push(args);
      }
    });
    sidebar = null;
  });

  afterEach(() => {
    sidebar?.dispose();
  });

  it('has the documented id and title, and starts in the loading state', () => {
    const widget = make(new FakeFetcher([INDEX]));
    expect(widget.id).toBe('nvdashboard-sidebar');
    expect(text(widget)).toContain('GPU Dashboards');
    expect(widget.state.kind).toBe('loading');
    expect(text(widget)).toContain(LOADING_TEXT);
    expect(buttons(widget)).toHaveLength(0);
  });

  it('stays loading while the proxied server is starting', async () => {
    const widget = make(
      new FakeFetcher([
        new FetchError(502, 'Bad Gateway'),
        new TypeError('Failed to fetch')
      ])
    );
    expect(await settled(widget.refresh())).toBe('retry');
    expect(widget.state.kind).toBe('loading');
    expect(await settled(widget.refresh())).toBe('retry');
    expect(text(widget)).toContain(LOADING_TEXT);
    expect(widget.node.querySelector('[role=alert]')).toBeNull();
  });

  it('renders one button per route, with data-route', async () => {
    const widget = make(new FakeFetcher([INDEX]));
    expect(await settled(widget.refresh())).toBe('ok');
    const found = buttons(widget);
    expect(found.map(b => b.dataset.route)).toEqual(Object.keys(INDEX));
    expect(found.map(b => b.textContent)).toEqual(Object.values(INDEX));
    expect(text(widget)).not.toContain(LOADING_TEXT);
    expect(text(widget)).toContain('1 GPU');
    expect(text(widget)).toContain('GPU 0: NVIDIA H200');
  });

  it('runs nvdashboard:open with route and label on click', async () => {
    const widget = make(new FakeFetcher([INDEX]));
    await settled(widget.refresh());
    buttons(widget)[1].click();
    await waitFor(() => opened.length === 1);
    expect(opened[0]).toEqual({ route: '/GPU-Memory', label: 'GPU Memory' });
  });

  it('says "no GPU" with the state and the server message', async () => {
    const widget = make(
      new FakeFetcher(
        [{ '/Machine-Resources': 'Machine Resources' }],
        [
          {
            ...DEFAULT_INFO,
            nvml_state: 'driver_not_loaded',
            nvml_message: 'The NVIDIA kernel module is not loaded.',
            gpu_count: 0,
            devices: []
          }
        ]
      )
    );
    await settled(widget.refresh());
    const status = widget.node.querySelector<HTMLElement>(
      '.nvdashboard-status'
    )!;
    expect(status.dataset.kind).toBe('no-gpu');
    expect(status.textContent).toContain(
      'No GPU: the NVIDIA driver is not loaded.'
    );
    expect(status.textContent).toContain(
      'The NVIDIA kernel module is not loaded.'
    );
    expect(buttons(widget).map(b => b.dataset.route)).toEqual([
      '/Machine-Resources'
    ]);
    // Why there is no GPU is not hidden behind a click.
    expect(status.querySelector('details')!.open).toBe(true);
  });

  it('keeps the GPU lines a click under the headline, as the user leaves them', async () => {
    const fetcher = new FakeFetcher([INDEX]);
    const widget = make(fetcher);
    await settled(widget.refresh());
    const details = (): HTMLDetailsElement =>
      widget.node.querySelector<HTMLDetailsElement>(
        '.nvdashboard-status details'
      )!;
    expect(details().querySelector('summary')!.textContent).toBe('1 GPU');
    expect(details().open).toBe(false);
    expect(details().textContent).toContain('GPU 0: NVIDIA H200');
    details().open = true;
    details().dispatchEvent(new Event('toggle'));
    // The status changes (a second GPU): drawn again, still open.
    fetcher.infoAnswers = [
      {
        ...DEFAULT_INFO,
        gpu_count: 2,
        devices: [...DEFAULT_INFO.devices, { index: 1, name: 'NVIDIA H200' }]
      }
    ];
    await settled(widget.refresh());
    expect(details().querySelector('summary')!.textContent).toBe('2 GPUs');
    expect(details().open).toBe(true);
  });

  it('says "Simulated GPUs (N)"', async () => {
    const devices = [0, 1, 2, 3].map(index => ({
      index,
      name: 'Simulated H200'
    }));
    const widget = make(
      new FakeFetcher(
        [INDEX],
        [{ ...DEFAULT_INFO, simulated: true, gpu_count: 4, devices }]
      )
    );
    await settled(widget.refresh());
    const status = widget.node.querySelector<HTMLElement>(
      '.nvdashboard-status'
    )!;
    expect(status.dataset.kind).toBe('simulated');
    expect(status.textContent).toContain('Simulated GPUs (4)');
    expect(status.textContent).toContain('GPU 3: Simulated H200');
  });

  it('indents MIG devices under their GPU and marks a lost GPU', async () => {
    const gpu = {
      index: 0,
      label: 'GPU 0',
      kind: 'gpu',
      parent: null,
      cuda_index: null,
      name: 'NVIDIA A100-SXM4-80GB',
      mig_enabled: true
    };
    const mig = {
      index: 1,
      label: 'GPU 0 · MIG 1',
      kind: 'mig',
      parent: 0,
      cuda_index: 0,
      name: 'NVIDIA A100-SXM4-80GB MIG 3g.40gb',
      memory_total_bytes: 42949672960,
      mig: {
        gpu_instance_id: 1,
        compute_instance_id: 0,
        gpu_slices: 3,
        compute_slices: 3,
        memory_slices: 4,
        multiprocessors: 42
      }
    };
    const lost = {
      ...gpu,
      index: 2,
      label: 'GPU 1',
      cuda_index: 1,
      mig_enabled: false,
      lost: true
    };
    const widget = make(
      new FakeFetcher(
        [INDEX],
        [{ ...DEFAULT_INFO, gpu_count: 3, devices: [gpu, mig, lost] }]
      )
    );
    await settled(widget.refresh());
    const lines = Array.from(
      widget.node.querySelectorAll<HTMLElement>(`.${STATUS_DETAIL_CLASS}`)
    );
    expect(
      lines.map(line => line.classList.contains(STATUS_MIG_CLASS))
    ).toEqual([false, true, false]);
    expect(lines[0].textContent).toBe(
      'GPU 0 (not visible to CUDA, MIG enabled): NVIDIA A100-SXM4-80GB'
    );
    expect(lines[1].textContent).toMatch(
      /^↳ GPU 0 · MIG 1 \(CUDA 0\): 3g\.40gb, 40\.0 GiB/
    );
    expect(lines[2].classList.contains('nvdashboard-mod-lost')).toBe(true);
    expect(lines[2].textContent).toContain('lost');
    expect(lines[0].classList.contains('nvdashboard-mod-lost')).toBe(false);
  });

  it('shows a state it does not know instead of a parse error', async () => {
    const widget = make(
      new FakeFetcher(
        [INDEX],
        [
          {
            ...DEFAULT_INFO,
            nvml_state: 'hibernating',
            nvml_message: 'Zzz.',
            devices: []
          }
        ]
      )
    );
    await settled(widget.refresh());
    const status = widget.node.querySelector<HTMLElement>(
      '.nvdashboard-status'
    )!;
    expect(status.dataset.kind).toBe('unknown');
    expect(status.textContent).toContain('"hibernating"');
    expect(status.textContent).toContain('Zzz.');
    expect(status.textContent).not.toContain('GPU status unavailable');
  });

  it('still lists dashboards when info.json fails', async () => {
    const widget = make(
      new FakeFetcher([INDEX], [new FetchError(500, 'boom')])
    );
    await settled(widget.refresh());
    expect(buttons(widget)).toHaveLength(3);
    expect(text(widget)).toContain('GPU status unavailable: boom');
  });

  it('reports a slow info.json only when nothing on the sidebar is live', async () => {
    // Under load info.json timed out while the meters kept updating, and the
    // sidebar said "GPU status unavailable" beside them (issue 44).
    const changed = new Signal<object, unknown>({});
    const readings = { live: true, changed };
    const slow = new FetchError(599, 'no answer within 10 s');
    const widget = make(new FakeFetcher([INDEX], [slow]), {
      liveReadings: readings
    });
    await settled(widget.refresh());
    MessageLoop.flush();
    expect(buttons(widget)).toHaveLength(3);
    expect(text(widget)).not.toContain('unavailable');
    expect(text(widget)).not.toContain('slow to answer');
    // The meters go stale too: now nothing is live, and it says why.
    readings.live = false;
    changed.emit(undefined);
    MessageLoop.flush();
    expect(text(widget)).toContain(
      'GPU status: the dashboard server is slow to answer (no answer within 10 s)'
    );
    readings.live = true;
    changed.emit(undefined);
    MessageLoop.flush();
    expect(text(widget)).not.toContain('slow to answer');
  });

  it('keeps the GPU status it read when info.json later fails', async () => {
    const fetcher = new FakeFetcher([INDEX]);
    const widget = make(fetcher);
    await settled(widget.refresh());
    const before = widget.node.querySelector(
      '.nvdashboard-status'
    )!.textContent;
    fetcher.infoAnswers = [new FetchError(599, 'no answer within 10 s')];
    await settled(widget.refresh());
    MessageLoop.flush();
    expect(widget.node.querySelector('.nvdashboard-status')!.textContent).toBe(
      before
    );
    expect(text(widget)).not.toContain('unavailable');
  });

  it("names the server's package version in its footer, and keeps it", async () => {
    const fetcher = new FakeFetcher([INDEX]);
    const widget = make(fetcher);
    const footer = widget.node.querySelector<HTMLElement>(
      '.nvdashboard-sidebar-footer'
    )!;
    expect(footer.hidden).toBe(true); // nothing read yet: nothing claimed
    await settled(widget.refresh());
    MessageLoop.flush();
    expect(footer.hidden).toBe(false);
    expect(footer.textContent).toBe(`NVDashboard ${DEFAULT_INFO.version}`);
    fetcher.infoAnswers = [new FetchError(599, 'no answer within 10 s')];
    await settled(widget.refresh());
    MessageLoop.flush();
    expect(footer.textContent).toBe(`NVDashboard ${DEFAULT_INFO.version}`);
  });

  it('says so when there are no dashboards', async () => {
    const widget = make(new FakeFetcher([{}]));
    await settled(widget.refresh());
    expect(text(widget)).toContain('No dashboards are available');
  });

  it('shows a bad index as an error', async () => {
    const widget = make(new FakeFetcher([{ '/GPU-Utilization': 3 }]));
    await settled(widget.refresh());
    expect(widget.state.kind).toBe('error');
    const alert = widget.node.querySelector('[role=alert]')!;
    expect(alert.textContent).toContain('is not a string');
  });

  it('re-renders only when the list or status changes', async () => {
    const fetcher = new FakeFetcher([INDEX]);
    const widget = make(fetcher);
    const changes: DashboardIndex[] = [];
    widget.indexChanged.connect((_, index) => changes.push(index));
    await settled(widget.refresh());
    const renders = widget.renderCount;
    const first = buttons(widget)[0];
    await settled(widget.refresh());
    await settled(widget.refresh());
    expect(widget.renderCount).toBe(renders);
    expect(buttons(widget)[0]).toBe(first);
    expect(changes).toHaveLength(1);

    // A status change re-renders but is not an index change.
    fetcher.infoAnswers = [{ ...DEFAULT_INFO, gpu_count: 2 }];
    await settled(widget.refresh());
    expect(widget.renderCount).toBe(renders + 1);
    expect(changes).toHaveLength(1);

    // A list change re-renders and is announced.
    fetcher.indexAnswers = [{ '/GPU-Memory': 'GPU Memory' }];
    await settled(widget.refresh());
    expect(widget.renderCount).toBe(renders + 2);
    expect(changes).toEqual([INDEX, { '/GPU-Memory': 'GPU Memory' }]);
  });

  it('shows the error, keeps polling and recovers', async () => {
    const fetcher = new FakeFetcher([
      new FetchError(404, 'GET /nvdashboard/index.json answered 404 Not Found'),
      new FetchError(404, 'GET /nvdashboard/index.json answered 404 Not Found'),
      INDEX
    ]);
    const states: string[] = [];
    const widget = make(fetcher, {
      autoStart: true,
      retryInterval: 5,
      interval: 50,
      stuckMax: 100
    });
    widget.stateChanged.connect((_, state) => states.push(state.kind));
    await waitFor(() => widget.state.kind === 'error');
    expect(widget.node.querySelector('[role=alert]')!.textContent).toContain(
      'answered 404 Not Found'
    );
    expect(text(widget)).toContain('Retrying…');
    await waitFor(() => widget.state.kind === 'ready');
    expect(fetcher.indexCalls).toBeGreaterThanOrEqual(3);
    expect(buttons(widget)).toHaveLength(3);
    // The two identical errors rendered once.
    expect(states).toEqual(['error', 'ready']);
  });

  it('retries with growing delays while failing', async () => {
    // Poll picks each delay at random between the interval and the grown
    // previous delay; pin the top of that range to make growth certain.
    const random = jest.spyOn(Math, 'random').mockReturnValue(0.999);
    try {
      const fetcher = new FakeFetcher([
        new FetchError(503, 'Service Unavailable')
      ]);
      const widget = make(fetcher, {
        autoStart: true,
        retryInterval: 4,
        interval: 50,
        retryMax: 100
      });
      const delays: number[] = [];
      widget.poll.ticked.connect((_, state) => {
        if (state.phase !== 'started') {
          delays.push(state.interval);
        }
      });
      await waitFor(() => delays.length >= 5);
      // Delays grow threefold from the retry interval up to the maximum,
      // from the first failure on.
      expect(delays.slice(0, 5)).toEqual([4, 12, 36, 100, 100]);
      expect(widget.state.kind).toBe('loading');
    } finally {
      random.mockRestore();
    }
  });

  it('waits longer each time on a 404, which will not heal by itself', async () => {
    const notFound = new FetchError(404, 'answered 404 Not Found');
    const widget = make(new FakeFetcher([notFound]), {
      autoStart: true,
      interval: 10,
      retryMax: 8
    });
    const ticks = recordTicks(widget);
    const waits = (): number[] =>
      ticks.filter(([phase]) => phase !== 'started').map(([, wait]) => wait);
    await waitFor(() => waits().length >= 4);
    // Not the retry maximum (8 ms, for a server on its way up): doubling.
    expect(waits().slice(0, 4)).toEqual([10, 20, 40, 80]);
    expect(widget.poll.frequency.max).toBeGreaterThanOrEqual(60_000);
  });

  it('says "stale" once, not at every failed poll', async () => {
    let now = 5_000_000;
    const fetcher = new FakeFetcher([INDEX]);
    const widget = make(fetcher, { now: () => now });
    await settled(widget.refresh());
    const live = widget.node.querySelector<HTMLElement>(
      '.nvdashboard-stale [role=status]'
    )!;
    const { said, stop } = announcements(live);
    fetcher.indexAnswers = [new FetchError(502, 'Bad Gateway')];
    for (let i = 0; i < 3; i++) {
      now += 5000;
      await settled(widget.refresh());
    }
    await Promise.resolve();
    expect(said.length).toBe(1);
    expect(text(widget)).toContain('read 15 s ago');
    stop();
  });

  it('asks nothing while collapsed, and at once when opened', async () => {
    // A collapsed sidebar's poll used to relaunch a dashboard server that had
    // exited when idle (issue 43).
    jest.useFakeTimers({ doNotFake: ['queueMicrotask', 'nextTick'] });
    try {
      const fetcher = new FakeFetcher([INDEX]);
      const widget = make(fetcher, { autoStart: true, interval: 1000 });
      await jest.advanceTimersByTimeAsync(3500);
      expect(fetcher.indexCalls).toBeGreaterThanOrEqual(3);
      widget.hide(); // JupyterLab collapses its left area by hiding the panel
      const calls = fetcher.indexCalls;
      const infoCalls = fetcher.infoCalls;
      await jest.advanceTimersByTimeAsync(60_000);
      expect(fetcher.indexCalls).toBe(calls);
      expect(fetcher.infoCalls).toBe(infoCalls);
      widget.show();
      await jest.advanceTimersByTimeAsync(0);
      expect(fetcher.indexCalls).toBe(calls + 1);
    } finally {
      jest.useRealTimers();
    }
  });

  it('started collapsed, reads the list once (for the palette) and no more', async () => {
    jest.useFakeTimers({ doNotFake: ['queueMicrotask', 'nextTick'] });
    try {
      const fetcher = new FakeFetcher([INDEX]);
      sidebar = new DashboardSidebar({
        fetcher,
        commands,
        standby: 'never',
        interval: 1000
      });
      const indexes: DashboardIndex[] = [];
      sidebar.indexChanged.connect((_, index) => indexes.push(index));
      sidebar.hide();
      Widget.attach(sidebar, document.body);
      await jest.advanceTimersByTimeAsync(60_000);
      expect(fetcher.indexCalls).toBe(1);
      expect(indexes).toEqual([INDEX]);
    } finally {
      jest.useRealTimers();
    }
  });

  it('stops polling when disposed', async () => {
    const fetcher = new FakeFetcher([INDEX]);
    const widget = make(fetcher, {
      autoStart: true,
      retryInterval: 5,
      interval: 5
    });
    await waitFor(() => fetcher.indexCalls >= 2);
    widget.dispose();
    const calls = fetcher.indexCalls;
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(fetcher.indexCalls).toBeLessThanOrEqual(calls + 1);
    expect(widget.poll.isDisposed).toBe(true);
  });

  it('keeps the list after a failed poll and says it is stale, with its age', async () => {
    let now = 5_000_000;
    const fetcher = new FakeFetcher([INDEX]);
    const widget = make(fetcher, { now: () => now });
    await settled(widget.refresh());
    const first = buttons(widget)[0];
    now += 30_000;
    fetcher.indexAnswers = [new FetchError(502, 'Bad Gateway')];
    expect(await settled(widget.refresh())).toBe('retry');
    expect(widget.state.kind).toBe('ready');
    expect(buttons(widget)[0]).toBe(first);
    const stale = widget.node.querySelector<HTMLElement>('.nvdashboard-stale')!;
    expect(stale.hidden).toBe(false);
    expect(stale.textContent).toContain(
      'Stale: the dashboard server did not answer.'
    );
    expect(stale.textContent).toContain('read 30 s ago (Bad Gateway)');
    fetcher.indexAnswers = [INDEX];
    await settled(widget.refresh());
    expect(stale.hidden).toBe(true);
    expect(buttons(widget)[0]).toBe(first);
  });

  it('finds a returning server within the retry maximum, after a success', async () => {
    const random = jest.spyOn(Math, 'random').mockReturnValue(0.999);
    try {
      const fetcher = new FakeFetcher([
        INDEX,
        new FetchError(502, 'Bad Gateway'),
        INDEX
      ]);
      const widget = make(fetcher, {
        autoStart: true,
        retryInterval: 5,
        retryMax: 20,
        interval: 100
      });
      const ticks = recordTicks(widget);
      await waitFor(() => fetcher.indexCalls >= 3);
      const waits = ticks
        .filter(([phase]) => phase !== 'started')
        .map(([, interval]) => interval);
      // Lumino alone would draw up to 3 × 100 ms after the failure.
      expect(waits.slice(0, 2)).toEqual([100, 5]);
    } finally {
      random.mockRestore();
    }
  });

  it('asks again at the retry interval while the server is reading its GPUs', async () => {
    // Start-up: the server answers before its first GPU read, with the machine
    // dashboards only; the GPU dashboards join once the read is done.
    const machineOnly = { '/Machine-Resources': 'Machine Resources' };
    const fetcher = new FakeFetcher(
      [machineOnly, machineOnly, INDEX],
      [
        { ...DEFAULT_INFO, gpu_count: 0, devices: [], reading_gpus: true },
        { ...DEFAULT_INFO, gpu_count: 0, devices: [], reading_gpus: true },
        DEFAULT_INFO
      ]
    );
    const widget = make(fetcher, {
      autoStart: true,
      retryInterval: 5,
      retryMax: 20,
      interval: 60_000
    });
    const ticks = recordTicks(widget);
    await waitFor(() => buttons(widget).length === Object.keys(INDEX).length);
    expect(fetcher.indexCalls).toBe(3);
    // Once the GPUs are read, the list settles to its own (slow) interval.
    await waitFor(() => ticks[ticks.length - 1]?.[1] === 60_000);
    expect(ticks.slice(0, 2).every(([, interval]) => interval <= 20)).toBe(
      true
    );
  });

  it('draws nothing while hidden and catches up when shown', async () => {
    const fetcher = new FakeFetcher([INDEX]);
    const widget = make(fetcher);
    await settled(widget.refresh());
    widget.hide();
    const renders = widget.renderCount;
    fetcher.indexAnswers = [{ '/GPU-Memory': 'GPU Memory' }];
    await settled(widget.refresh());
    expect(widget.renderCount).toBe(renders);
    expect(buttons(widget)).toHaveLength(3);
    widget.show();
    expect(widget.renderCount).toBe(renders + 1);
    expect(buttons(widget)).toHaveLength(1);
  });

  it('keeps focus on a dashboard button when the GPU status changes', async () => {
    const fetcher = new FakeFetcher([INDEX]);
    const widget = make(fetcher);
    await settled(widget.refresh());
    const button = buttons(widget)[1];
    button.focus();
    fetcher.infoAnswers = [{ ...DEFAULT_INFO, gpu_count: 2 }];
    await settled(widget.refresh());
    expect(document.activeElement).toBe(button);
  });

  it('has its title and sections as headings', async () => {
    const widget = make(new FakeFetcher([INDEX]));
    await settled(widget.refresh());
    expect(widget.node.querySelector('h2')!.textContent).toBe('GPU Dashboards');
    expect(widget.node.querySelector('h3')!.textContent).toBe('Dashboards');
  });

  it('applies a new list refresh rate live', () => {
    const widget = make(new FakeFetcher([INDEX]));
    widget.interval = 1234;
    return widget.refresh().then(() => {
      widget.interval = 4321;
      expect(widget.poll.frequency.interval).toBe(4321);
    });
  });

  it('puts the keyboard in the panel when activated', async () => {
    const widget = make(new FakeFetcher([INDEX]));
    await settled(widget.refresh());
    MessageLoop.sendMessage(widget, Widget.Msg.ActivateRequest);
    expect(document.activeElement).toBe(buttons(widget)[0]);
  });
});
