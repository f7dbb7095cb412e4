/**
 * The nvdashboard JupyterLab plugin.
 *
 * - `nvdashboard:open {route, label}` opens a dashboard tab, or activates it
 *   when that route is already open. The sidebar, the palette and layout
 *   restoration all go through this one command.
 * - The "GPU Dashboards" sidebar lists the dashboards the server offers.
 * - Above the list, the live section: "Your GPU kernels", each GPU's
 *   meters, and why the GPUs of your kernels are slow; the status-bar item
 *   shows your GPU, else how many are free (or each GPU). Both read one glance:
 *   glance.json once, then its socket, which sends it when it changes.
 * - The idle-kernel notice (idleNotice.ts): a kernel of yours that holds
 *   GPU memory and does no GPU work is told once per idle episode, with
 *   Shut down kernel, Open notebook, Not now and Don't ask; what was told
 *   is kept in the state database; the admin's GPU idle cull is told too.
 * - In each notebook (notebooks.ts): under each cell that touched a GPU,
 *   a footer with what it did there (`/cell.json` over the cell's span on
 *   the kernel's clock), a click from /GPU-Activity on that span; in its
 *   toolbar, its kernel's GPU state from the same glance poll. Where a
 *   reload dropped footers (not saved), a hint says once how to keep them.
 * - Settings (schema/plugin.json): refresh rates, whether the status item
 *   shows and which figure, the idle notice, the cell footers and the
 *   notebook toolbar item; changes apply at once.
 * - A running cell that holds a GPU and leaves it waiting is told once
 *   per run (liveCellNotice.ts); its footer is live meanwhile.
 * - Dashboard pages follow JupyterLab's light/dark theme.
 *
 * Over 400 lines: `activate` wires every part to JupyterLab's services in
 * one place (the order matters: the glance before its users, the settings
 * last), and the settings reader sits beside the settings it applies.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  IThemeManager,
  Notification,
  showDialog,
  showErrorMessage,
  WidgetTracker
} from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { IDisposable } from '@lumino/disposable';

import { CellFooterMode } from './cells/cellReport';
import { CellReportRequests } from './cells/cellRequests';
import {
  createServerFetcher,
  fetchCellReport,
  fetchCulls,
  fetchGlance,
  openGlanceStream,
  postKeep,
  postNotice
} from './shared/fetcher';
import { FooterHints, SAVE_SETTING_TITLE } from './cells/footerHint';
import { GLANCE_INTERVAL_MS, StatusFigure } from './glance/glance';
import { GlanceModel } from './glance/glanceModel';
import { GlancePanel } from './glance/glancePanel';
import { GlanceStatusItem } from './glance/statusItem';
import { gpuIcon } from './shared/icon';
import {
  DEFAULT_NOTICE_SETTINGS,
  IIdleNoticeSettings,
  userThresholds
} from './glance/idleRule';
import { IdleNotifier } from './idle/idleNotice';
import {
  DEFAULT_LIVE_NOTICE_SETTINGS,
  ILiveCellNoticeSettings,
  LiveCellNotices
} from './cells/liveCellNotice';
import { TRANSLATION_DOMAIN } from './shared/format';
import { INotebookGpuSettings, NotebookGpu } from './cells/notebooks';
import { openOrActivate, toOpenArgs } from './dashboards/opener';
import { DashboardSidebar } from './dashboards/sidebar';
import {
  ACTIVITY_ROUTE,
  COMMAND_OPEN,
  DashboardIndex,
  ITimeRange,
  SIDEBAR_ID,
  TRACKER_NAMESPACE
} from './shared/tokens';
import { dashboardTheme } from './shared/urls';
import { DashboardWidget, isNotebookPath } from './dashboards/widget';

/** The plugin's id; also the key of its settings (schema/plugin.json). */
export const PLUGIN_ID = 'jupyterlab-nvdashboard:plugin';

/** JupyterLab's command that opens the settings editor (at a `query`). */
const SETTINGS_OPEN = 'settingeditor:open';

/** The id the status-bar item is registered under. */
export const STATUS_ITEM_ID = 'nvdashboard:glance';

/** The settings, as schema/plugin.json declares them. */
export interface INvdashboardSettings {
  refreshRate: number;
  dashboardListRefreshRate: number;
  showStatusItem: boolean;
  statusFigure: StatusFigure;
  idleNotice: IIdleNoticeSettings;
  /** Which cells get a GPU footer. */
  cellFooter: CellFooterMode;
  /** Save the footers into the notebook file. */
  saveCellFooter: boolean;
  /** Show the kernel's GPU state in each notebook's toolbar. */
  notebookToolbarItem: boolean;
  /** Tell about a running cell that holds a GPU and does little there. */
  liveCellNotice: ILiveCellNoticeSettings;
}

const CELL_FOOTER_MODES: ReadonlyArray<string> = ['off', 'gpu', 'all'];

export const DEFAULT_SETTINGS: INvdashboardSettings = {
  refreshRate: GLANCE_INTERVAL_MS / 1000,
  dashboardListRefreshRate: 15,
  showStatusItem: true,
  statusFigure: 'summary',
  idleNotice: DEFAULT_NOTICE_SETTINGS,
  cellFooter: 'gpu',
  saveCellFooter: false,
  notebookToolbarItem: true,
  liveCellNotice: DEFAULT_LIVE_NOTICE_SETTINGS
};

/** Read the composite settings, falling back to the defaults for anything odd. */
export function readSettings(composite: unknown): INvdashboardSettings {
  const c = (composite ?? {}) as Record<string, unknown>;
  const seconds = (value: unknown, fallback: number, min: number): number =>
    typeof value === 'number' && Number.isFinite(value) && value >= min
      ? value
      : fallback;
  const notice = DEFAULT_NOTICE_SETTINGS;
  return {
    refreshRate: seconds(c.refreshRate, DEFAULT_SETTINGS.refreshRate, 0.5),
    dashboardListRefreshRate: seconds(
      c.dashboardListRefreshRate,
      DEFAULT_SETTINGS.dashboardListRefreshRate,
      1
    ),
    showStatusItem: c.showStatusItem !== false,
    statusFigure: c.statusFigure === 'each' ? 'each' : 'summary',
    idleNotice: {
      enabled: c.idleNotice !== false,
      memoryGiB: seconds(c.idleNoticeMemoryGiB, notice.memoryGiB, 0),
      idleMinutes: seconds(c.idleNoticeMinutes, notice.idleMinutes, 0),
      snoozeMinutes: seconds(c.idleNoticeSnoozeMinutes, notice.snoozeMinutes, 0)
    },
    cellFooter:
      typeof c.cellFooter === 'string' &&
      CELL_FOOTER_MODES.includes(c.cellFooter)
        ? (c.cellFooter as CellFooterMode)
        : DEFAULT_SETTINGS.cellFooter,
    saveCellFooter: c.saveCellFooter === true,
    notebookToolbarItem: c.notebookToolbarItem !== false,
    liveCellNotice: {
      enabled: c.liveCellNotice !== false,
      minutes: seconds(
        c.liveCellNoticeMinutes,
        DEFAULT_LIVE_NOTICE_SETTINGS.minutes,
        0
      )
    }
  };
}

/** What each notebook's GPU parts follow, from the settings. */
export function notebookSettings(
  values: INvdashboardSettings
): INotebookGpuSettings {
  return {
    cellFooter: values.cellFooter,
    saveCellFooter: values.saveCellFooter,
    toolbarItem: values.notebookToolbarItem,
    idleThresholds: userThresholds(values.idleNotice)
  };
}

/**
 * How a notebook path from the server or a dashboard page is opened: checked
 * for shape, then by the document manager (never as a URL); without one,
 * through the `docmanager:open` command.
 */
export function pathOpener(
  docManager: Pick<IDocumentManager, 'openOrReveal'> | null,
  commands: Pick<JupyterFrontEnd['commands'], 'execute'>
): (path: string) => void {
  return (path: string): void => {
    if (!isNotebookPath(path)) {
      return;
    }
    if (docManager) {
      void docManager.openOrReveal(path);
    } else {
      void commands.execute('docmanager:open', { path });
    }
  };
}

function activate(
  app: JupyterFrontEnd,
  restorer: ILayoutRestorer | null,
  palette: ICommandPalette | null,
  themes: IThemeManager | null,
  statusBar: IStatusBar | null,
  settingRegistry: ISettingRegistry | null,
  translator: ITranslator | null,
  docManager: IDocumentManager | null,
  state: IStateDB | null,
  notebooks: INotebookTracker | null
): void {
  const { commands, shell } = app;
  const trans = (translator ?? nullTranslator).load(TRANSLATION_DOMAIN);
  const settings = ServerConnection.makeSettings();
  const tracker = new WidgetTracker<DashboardWidget>({
    namespace: TRACKER_NAMESPACE
  });
  // Paths come from the server's glance.json or a dashboard page: checked
  // for shape, then opened by the document manager (never as a URL).
  const openPath = pathOpener(docManager, commands);

  commands.addCommand(COMMAND_OPEN, {
    label: args =>
      typeof args.label === 'string' && args.label
        ? args.label
        : trans.__('Open GPU Dashboard'),
    caption: args =>
      typeof args.label === 'string' && args.label
        ? trans.__('Open the %1 GPU dashboard', args.label)
        : trans.__('Open a GPU dashboard'),
    icon: gpuIcon,
    execute: args => {
      const openArgs = toOpenArgs(args);
      if (!openArgs) {
        throw new Error(
          `${COMMAND_OPEN} needs a route, got ${JSON.stringify(args)}`
        );
      }
      return openOrActivate(openArgs, {
        find: id => tracker.find(widget => widget.id === id),
        create: options =>
          new DashboardWidget({
            ...options,
            baseUrl: settings.baseUrl,
            theme: dashboardTheme(themes),
            openPath,
            trans
          }),
        attach: widget => {
          widget.title.icon = gpuIcon;
          shell.add(widget, 'main');
          void tracker.add(widget);
        },
        activate: widget => shell.activateById(widget.id),
        update: (widget, openArgs) => widget.setRange(openArgs.range ?? null)
      }).widget;
    }
  });

  if (restorer) {
    void restorer.restore(tracker, {
      command: COMMAND_OPEN,
      args: widget => ({ route: widget.route, label: widget.label }),
      name: widget => widget.route
    });
  }

  themes?.themeChanged.connect(() => {
    const theme = dashboardTheme(themes);
    tracker.forEach(widget => widget.setTheme(theme));
  });

  // One glance feeds the status-bar item, the sidebar's meters and kernel
  // list, and the idle notice: glance.json, then its socket, which sends it
  // only when it changed (glanceModel.ts). It is read only while JupyterLab
  // is visible and one of them is in use (the item enabled, the sidebar open,
  // notices on), at the refresh rate for the views, far less often for the
  // notice alone.
  // A poll that gets no answer within its interval (at least 1 s) has failed.
  const glance: GlanceModel = new GlanceModel({
    fetch: () => fetchGlance(settings, Math.max(1000, glance.interval)),
    connect: (intervalMs, handlers) =>
      openGlanceStream(settings, intervalMs, handlers)
  });
  const sidebar = new DashboardSidebar({
    fetcher: createServerFetcher(settings),
    commands,
    trans,
    liveReadings: glance
  });
  sidebar.id = SIDEBAR_ID;
  sidebar.title.icon = gpuIcon;
  sidebar.title.caption = trans.__('GPU Dashboards');
  shell.add(sidebar, 'left', { rank: 200 });
  restorer?.add(sidebar, SIDEBAR_ID);

  const kernels = app.serviceManager.kernels;
  const askedAbout = new Set<string>();
  // Only a kernel this Jupyter server runs can be shut down from here;
  // the server would answer 404 for any other, which reads as success.
  const isLocalKernel = (id: string): boolean => {
    for (const model of kernels.running()) {
      if (model.id === id) {
        return true;
      }
    }
    // A kernel started since the kernel list was last read: ask once now
    // rather than wait for the next refresh of that list.
    if (!askedAbout.has(id)) {
      askedAbout.add(id);
      void kernels.refreshRunning().catch(() => undefined);
    }
    return false;
  };
  const panel = new GlancePanel({
    model: glance,
    openPath,
    trans,
    confirm: async (title, body) =>
      (
        await showDialog({
          title,
          body,
          buttons: [
            Dialog.cancelButton({ label: trans.__('Cancel') }),
            Dialog.warnButton({ label: trans.__('Shut Down') })
          ]
        })
      ).button.accept,
    shutdownKernel: id => kernels.shutdown(id),
    showError: (title, error) => showErrorMessage(title, error as Error),
    isLocalKernel,
    localKernelsChanged: kernels.runningChanged
  });
  // "Your GPU kernels" sits right under the sidebar's title.
  sidebar.insertWidget(1, panel);

  // Without a state database (a stripped-down JupyterLab) the notice
  // remembers for this page only.
  const memory = new Map<string, unknown>();
  const notifier = new IdleNotifier({
    model: glance,
    notify: (message, type, actions) =>
      Notification.emit(message, type, { autoClose: false, actions }),
    reword: (id, message, type, actions) =>
      Notification.update({ id, message, type, autoClose: false, actions }),
    dismiss: id => Notification.dismiss(id),
    shutdownKernel: id => kernels.shutdown(id),
    openPath,
    isLocalKernel,
    localKernelsChanged: kernels.runningChanged,
    postNotice: (id, episode) => postNotice(settings, id, episode),
    postKeep: id => postKeep(settings, id),
    fetchCulls: () => fetchCulls(settings),
    store: state ?? {
      fetch: async id => memory.get(id),
      save: async (id, value) => memory.set(id, value)
    },
    showError: (title, error) => void showErrorMessage(title, error as Error),
    trans
  });

  // A running cell that holds a GPU and does little there, told once per run
  // (liveCellNotice.ts); off until the settings say.
  const openActivity = (range: ITimeRange): void =>
    void commands.execute(COMMAND_OPEN, {
      route: ACTIVITY_ROUTE,
      label: trans.__('GPU Activity'),
      range: { ...range }
    });
  const liveNotices = new LiveCellNotices({
    model: glance,
    notify: (message, actions) =>
      void Notification.warning(message, { autoClose: false, actions }),
    open: openActivity,
    trans
  });

  // Off until the settings say whether the user wants it, so a user who
  // turned it off never has the glance polled for it; without a status bar
  // nobody would see it.
  const item = new GlanceStatusItem({
    model: glance,
    onActivate: () => shell.activateById(SIDEBAR_ID),
    enabled: false,
    trans
  });
  if (statusBar) {
    statusBar.registerStatusItem(STATUS_ITEM_ID, {
      item,
      align: 'left',
      rank: 100,
      isActive: () => item.isActive(),
      activeStateChanged: item.activeStateChanged
    });
  }

  // Each notebook's cell footers and toolbar item, following the settings.
  let current = DEFAULT_SETTINGS;
  // Once, where a reload dropped footers, how to keep them (footerHint.ts).
  const hintMemory = new Map<string, unknown>();
  const hints = new FooterHints({
    store: state ?? {
      fetch: async id => hintMemory.get(id),
      save: async (id, value) => hintMemory.set(id, value)
    },
    canOpenSettings: () => commands.hasCommand(SETTINGS_OPEN),
    openSettings: () =>
      void commands.execute(SETTINGS_OPEN, { query: SAVE_SETTING_TITLE }),
    trans
  });
  const notebookParts = new Set<NotebookGpu>();
  // One queue for the Lab: one request per run across views, a few at once.
  const cellRequests = new CellReportRequests((kernelId, start, end) =>
    fetchCellReport(settings, kernelId, start, end)
  );
  notebooks?.widgetAdded.connect((_, panel) => {
    const parts = new NotebookGpu(panel, {
      glance,
      fetchReport: cellRequests.fetch,
      open: openActivity,
      settings: notebookSettings(current),
      trans,
      hints
    });
    notebookParts.add(parts);
    panel.disposed.connect(() => notebookParts.delete(parts));
  });

  const apply = (values: INvdashboardSettings): void => {
    current = values;
    const perNotebook = notebookSettings(values);
    notebookParts.forEach(parts => parts.apply(perNotebook));
    glance.interval = values.refreshRate * 1000;
    sidebar.interval = values.dashboardListRefreshRate * 1000;
    item.enabled = statusBar !== null && values.showStatusItem;
    item.figure = values.statusFigure;
    notifier.settings = values.idleNotice;
    liveNotices.settings = values.liveCellNotice;
    panel.idleThresholds = userThresholds(values.idleNotice);
  };
  if (settingRegistry) {
    settingRegistry
      .load(PLUGIN_ID)
      .then(loaded => {
        apply(readSettings(loaded.composite));
        loaded.changed.connect(() => apply(readSettings(loaded.composite)));
      })
      .catch(reason => {
        console.warn(
          'nvdashboard: settings not loaded, using the defaults',
          reason
        );
        apply(DEFAULT_SETTINGS);
      });
  } else {
    apply(DEFAULT_SETTINGS);
  }

  if (palette) {
    // One palette entry per dashboard, kept in step with the index.
    const entries = new Map<string, IDisposable>();
    sidebar.indexChanged.connect((_, index: DashboardIndex) => {
      for (const [key, entry] of entries) {
        const [route, label] = JSON.parse(key) as [string, string];
        if (index[route] !== label) {
          entry.dispose();
          entries.delete(key);
        }
      }
      for (const [route, label] of Object.entries(index)) {
        const key = JSON.stringify([route, label]);
        if (!entries.has(key)) {
          entries.set(
            key,
            palette.addItem({
              command: COMMAND_OPEN,
              args: { route, label },
              category: trans.__('GPU Dashboards')
            })
          );
        }
      }
    });
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Live GPU dashboards served by a Bokeh server.',
  autoStart: true,
  optional: [
    ILayoutRestorer,
    ICommandPalette,
    IThemeManager,
    IStatusBar,
    ISettingRegistry,
    ITranslator,
    IDocumentManager,
    IStateDB,
    INotebookTracker
  ],
  activate
};

export default plugin;
