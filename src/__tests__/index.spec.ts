import { JupyterFrontEnd } from '@jupyterlab/application';
import { CommandRegistry } from '@lumino/commands';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { GlancePanel } from '../glance/glancePanel';
import { NOTICE_INTERVAL_MS } from '../idle/noticePace';
import { GlanceStatusItem } from '../glance/statusItem';
import plugin, {
  pathOpener,
  PLUGIN_ID,
  readSettings,
  STATUS_ITEM_ID
} from '../index';
import { DashboardSidebar } from '../dashboards/sidebar';
import { COMMAND_OPEN, SIDEBAR_ID } from '../shared/tokens';

async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) {
    await Promise.resolve();
  }
}

describe('the plugin', () => {
  beforeEach(() => {
    // No timer fires: the polls are started but never tick in these tests.
    jest.useFakeTimers({ doNotFake: ['queueMicrotask', 'nextTick'] });
    (globalThis as { fetch?: unknown }).fetch = () =>
      Promise.reject(new TypeError('Failed to fetch'));
  });

  afterEach(() => {
    jest.useRealTimers();
  });

  function activate(composite: Record<string, unknown> = {}) {
    const commands = new CommandRegistry();
    const added: Array<{ widget: Widget; area: string }> = [];
    const activated: string[] = [];
    const kernels = {
      running: () => [{ id: 'k1' }][Symbol.iterator](),
      runningChanged: new Signal<object, unknown>({}),
      shutdown: jest.fn(() => Promise.resolve()),
      refreshRunning: jest.fn(() => Promise.resolve())
    };
    const app = {
      commands,
      shell: {
        add: (widget: Widget, area: string) => added.push({ widget, area }),
        activateById: (id: string) => activated.push(id)
      },
      serviceManager: { kernels }
    } as unknown as JupyterFrontEnd;
    const restorer = {
      restore: jest.fn(() => Promise.resolve()),
      add: jest.fn()
    };
    const palette = { addItem: jest.fn(() => ({ dispose: jest.fn() })) };
    const statusBar = { registerStatusItem: jest.fn() };
    const settings = { composite, changed: new Signal<object, void>({}) };
    const registry = { load: jest.fn(() => Promise.resolve(settings)) };
    const docManager = { openOrReveal: jest.fn() };
    (plugin.activate as (...args: unknown[]) => void)(
      app,
      restorer,
      palette,
      null,
      statusBar,
      registry,
      null,
      docManager
    );
    return {
      commands,
      added,
      activated,
      restorer,
      palette,
      statusBar,
      settings,
      registry,
      docManager
    };
  }

  it('is the documented plugin, with every service optional', () => {
    expect(plugin.id).toBe(PLUGIN_ID);
    expect(plugin.autoStart).toBe(true);
    expect(plugin.requires ?? []).toEqual([]);
    expect(plugin.optional).toHaveLength(9);
  });

  it('registers the open command, the restorer and the sidebar with the kernels first', () => {
    const { commands, added, restorer } = activate();
    expect(commands.hasCommand(COMMAND_OPEN)).toBe(true);
    expect(commands.label(COMMAND_OPEN, {})).toBe('Open GPU Dashboard');
    expect(commands.caption(COMMAND_OPEN, { label: 'GPU Memory' })).toBe(
      'Open the GPU Memory GPU dashboard'
    );
    expect(restorer.restore).toHaveBeenCalledWith(
      expect.anything(),
      expect.objectContaining({ command: COMMAND_OPEN })
    );
    expect(restorer.add).toHaveBeenCalledWith(
      expect.any(DashboardSidebar),
      SIDEBAR_ID
    );
    const sidebar = added.find(a => a.area === 'left')!
      .widget as DashboardSidebar;
    expect(sidebar.id).toBe(SIDEBAR_ID);
    expect(sidebar.widgets[1]).toBeInstanceOf(GlancePanel);
    sidebar.dispose();
  });

  it('adds a palette entry per dashboard, kept in step with the index', async () => {
    const { palette, added } = activate();
    const sidebar = added.find(a => a.area === 'left')!
      .widget as DashboardSidebar;
    (
      sidebar.indexChanged as Signal<DashboardSidebar, Record<string, string>>
    ).emit({
      '/GPU-Memory': 'GPU Memory'
    });
    expect(palette.addItem).toHaveBeenCalledWith({
      command: COMMAND_OPEN,
      args: { route: '/GPU-Memory', label: 'GPU Memory' },
      category: 'GPU Dashboards'
    });
    sidebar.dispose();
  });

  it('registers a status item that is inactive without a GPU and opens the sidebar', () => {
    const { statusBar, activated, added } = activate();
    expect(statusBar.registerStatusItem).toHaveBeenCalledTimes(1);
    const [id, options] = statusBar.registerStatusItem.mock
      .calls[0] as unknown as [
      string,
      {
        item: GlanceStatusItem;
        isActive: () => boolean;
        activeStateChanged: unknown;
      }
    ];
    expect(id).toBe(STATUS_ITEM_ID);
    expect(options.item).toBeInstanceOf(GlanceStatusItem);
    expect(options.isActive()).toBe(false);
    expect(options.activeStateChanged).toBe(options.item.activeStateChanged);
    options.item.node.dispatchEvent(
      new KeyboardEvent('keydown', { key: 'Enter' })
    );
    expect(activated).toEqual([SIDEBAR_ID]);
    (added.find(a => a.area === 'left')!.widget as DashboardSidebar).dispose();
  });

  it('applies the settings, and their changes, live', async () => {
    const { registry, settings, statusBar, added } = activate({
      refreshRate: 5,
      showStatusItem: false,
      statusFigure: 'each'
    });
    await settle();
    expect(registry.load).toHaveBeenCalledWith(PLUGIN_ID);
    const sidebar = added.find(a => a.area === 'left')!
      .widget as DashboardSidebar;
    const panel = sidebar.widgets[1] as GlancePanel;
    const item = (
      statusBar.registerStatusItem.mock.calls[0] as unknown as [
        string,
        { item: GlanceStatusItem }
      ]
    )[1].item;
    expect(panel.model.interval).toBe(5000);
    // Only the idle notice reads it: at the notice's pace, not the refresh rate.
    expect(panel.model.poller.poll.frequency.interval).toBe(NOTICE_INTERVAL_MS);
    expect(item.enabled).toBe(false);
    expect(item.figure).toBe('each');
    settings.composite = {
      refreshRate: 1,
      showStatusItem: true,
      statusFigure: 'summary'
    };
    settings.changed.emit();
    expect(panel.model.poller.poll.frequency.interval).toBe(1000);
    expect(item.enabled).toBe(true);
    expect(item.figure).toBe('summary');
    sidebar.dispose();
    panel.model.dispose();
  });

  it('asks nothing for the glance with the status item, the sidebar and both notices off', async () => {
    const urls: string[] = [];
    (globalThis as { fetch?: unknown }).fetch = (input: unknown) => {
      urls.push(typeof input === 'string' ? input : (input as Request).url);
      return Promise.reject(new TypeError('Failed to fetch'));
    };
    const { added } = activate({
      showStatusItem: false,
      idleNotice: false,
      liveCellNotice: false
    });
    for (let i = 0; i < 30; i++) {
      jest.advanceTimersByTime(2000);
      await settle();
    }
    // The admin's cull was asked about (requests are seen), the glance never.
    expect(urls.some(url => url.includes('nvdashboard-idle/culls'))).toBe(true);
    expect(urls.filter(url => url.includes('glance.json'))).toEqual([]);
    const sidebar = added.find(a => a.area === 'left')!
      .widget as DashboardSidebar;
    (sidebar.widgets[1] as GlancePanel).model.dispose();
    sidebar.dispose();
  });

  it('reads the glance for the idle notice with the status item off and the sidebar closed', async () => {
    const urls: string[] = [];
    (globalThis as { fetch?: unknown }).fetch = (input: unknown) => {
      urls.push(typeof input === 'string' ? input : (input as Request).url);
      return Promise.reject(new TypeError('Failed to fetch'));
    };
    const { added } = activate({ showStatusItem: false });
    for (let i = 0; i < 10; i++) {
      jest.advanceTimersByTime(2000);
      await settle();
    }
    expect(urls.some(url => url.includes('glance.json'))).toBe(true);
    // The admin's cull is asked about once (the server extension's route).
    expect(urls.some(url => url.includes('nvdashboard-idle/culls'))).toBe(true);
    const sidebar = added.find(a => a.area === 'left')!
      .widget as DashboardSidebar;
    (sidebar.widgets[1] as GlancePanel).model.dispose();
    sidebar.dispose();
  });

  it('reads the glance for the idle notice alone once a minute, and at the refresh rate while the sidebar is open', async () => {
    // glance.json answers with a GPU (an `ok` answer: the next poll comes
    // at the interval, with none of Lumino's random retry waits).
    const urls: string[] = [];
    const device = {
      index: 0,
      label: 'GPU 0',
      kind: 'gpu',
      utilization_pct: 0,
      memory_used_bytes: 0,
      memory_total_bytes: 2 ** 30
    };
    (globalThis as { fetch?: unknown }).fetch = (input: unknown) => {
      const url = typeof input === 'string' ? input : (input as Request).url;
      urls.push(url);
      return url.includes('glance.json')
        ? Promise.resolve({
            ok: true,
            status: 200,
            statusText: 'OK',
            json: () => Promise.resolve({ devices: [device], kernels: [] })
          })
        : Promise.reject(new TypeError('Failed to fetch'));
    };
    const glanceReads = (): number =>
      urls.filter(url => url.includes('glance.json')).length;
    const readsIn = async (ms: number): Promise<number> => {
      const before = glanceReads();
      for (let t = 0; t < ms; t += 1000) {
        await jest.advanceTimersByTimeAsync(1000);
        await settle();
      }
      return glanceReads() - before;
    };
    // Notices on (the default), the status item off, the sidebar closed.
    const { added } = activate({ showStatusItem: false });
    const sidebar = added.find(a => a.area === 'left')!
      .widget as DashboardSidebar;
    const model = (sidebar.widgets[1] as GlancePanel).model;
    expect(await readsIn(1000)).toBe(1); // the first reading, at once
    expect(model.currentInterval).toBe(NOTICE_INTERVAL_MS);
    // Five minutes: one reading a minute, not 150 at the 2 s refresh rate.
    const slow = await readsIn(5 * 60_000);
    expect(slow).toBeGreaterThanOrEqual(4);
    expect(slow).toBeLessThanOrEqual(6);

    // The sidebar opens: a reading at once, then every 2 s again.
    Widget.attach(sidebar, document.body);
    expect(await readsIn(1000)).toBe(1);
    expect(model.currentInterval).toBe(2000);
    const fast = await readsIn(20_000);
    expect(fast).toBeGreaterThanOrEqual(9);
    expect(fast).toBeLessThanOrEqual(11);

    // It closes: once a minute again (after the 2 s wait already set).
    sidebar.hide();
    expect(model.currentInterval).toBe(NOTICE_INTERVAL_MS);
    const slowAgain = await readsIn(5 * 60_000);
    expect(slowAgain).toBeGreaterThanOrEqual(4);
    expect(slowAgain).toBeLessThanOrEqual(7);
    model.dispose();
    sidebar.dispose();
  });

  it('reads odd settings as the defaults', () => {
    expect(
      readSettings({
        refreshRate: -1,
        statusFigure: 'mean',
        showStatusItem: 'no',
        cellFooter: 'some',
        saveCellFooter: 'yes',
        notebookToolbarItem: 0,
        liveCellNoticeMinutes: -2
      })
    ).toEqual({
      refreshRate: 2,
      dashboardListRefreshRate: 15,
      showStatusItem: true,
      statusFigure: 'summary',
      idleNotice: {
        enabled: true,
        memoryGiB: 1,
        idleMinutes: 30,
        snoozeMinutes: 60
      },
      cellFooter: 'gpu',
      saveCellFooter: false,
      notebookToolbarItem: true,
      liveCellNotice: { enabled: true, minutes: 5 }
    });
    expect(
      readSettings({
        cellFooter: 'all',
        saveCellFooter: true,
        notebookToolbarItem: false
      })
    ).toMatchObject({
      cellFooter: 'all',
      saveCellFooter: true,
      notebookToolbarItem: false
    });
    expect(
      readSettings({
        idleNotice: false,
        idleNoticeMemoryGiB: 4,
        idleNoticeMinutes: -3,
        idleNoticeSnoozeMinutes: 0.1
      }).idleNotice
    ).toEqual({
      enabled: false,
      memoryGiB: 4,
      idleMinutes: 30,
      snoozeMinutes: 0.1
    });
  });

  it('opens paths through the document manager, and only well-formed ones', () => {
    const opened: string[] = [];
    const executed: unknown[] = [];
    const commands = {
      execute: (id: string, args: unknown) => executed.push([id, args])
    };
    const open = pathOpener(
      { openOrReveal: (path: string) => (opened.push(path), undefined) },
      commands as never
    );
    open('work/a.ipynb');
    open('../../etc/passwd');
    expect(opened).toEqual(['work/a.ipynb']);
    expect(executed).toEqual([]);
    pathOpener(null, commands as never)('b.ipynb');
    expect(executed).toEqual([['docmanager:open', { path: 'b.ipynb' }]]);
  });
});
