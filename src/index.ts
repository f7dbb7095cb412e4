/**
 * The nvdashboard JupyterLab plugin.
 *
 * - `nvdashboard:open {route, label}` opens a dashboard tab, or activates it
 *   when that route is already open. The sidebar, the palette and layout
 *   restoration all go through this one command.
 * - The "GPU Dashboards" sidebar lists the dashboards the server offers.
 * - Dashboard pages follow JupyterLab's light/dark theme.
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
  showDialog,
  WidgetTracker
} from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { IDisposable } from '@lumino/disposable';

import { createServerFetcher, fetchGlance } from './fetcher';
import { GlanceModel, GlancePanel, GlanceStatusItem } from './glance';
import { gpuIcon } from './icon';
import { openOrActivate, toOpenArgs } from './opener';
import { DashboardSidebar } from './sidebar';
import {
  COMMAND_OPEN,
  DashboardIndex,
  PALETTE_CATEGORY,
  SIDEBAR_ID,
  SIDEBAR_TITLE,
  TRACKER_NAMESPACE
} from './tokens';
import { dashboardTheme } from './urls';
import { DashboardWidget } from './widget';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterlab-nvdashboard:plugin',
  description: 'Live GPU dashboards served by a Bokeh server.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, IThemeManager, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    themes: IThemeManager | null,
    statusBar: IStatusBar | null
  ): void => {
    const { commands, shell } = app;
    const settings = ServerConnection.makeSettings();
    const tracker = new WidgetTracker<DashboardWidget>({
      namespace: TRACKER_NAMESPACE
    });
    const openPath = (path: string): void => {
      void commands.execute('docmanager:open', { path });
    };

    commands.addCommand(COMMAND_OPEN, {
      label: args =>
        typeof args.label === 'string' && args.label
          ? args.label
          : 'Open GPU Dashboard',
      caption: args =>
        typeof args.label === 'string' && args.label
          ? `Open the ${args.label} GPU dashboard`
          : 'Open a GPU dashboard',
      icon: gpuIcon,
      execute: args => {
        const openArgs = toOpenArgs(args);
        if (!openArgs) {
          throw new Error(`${COMMAND_OPEN} needs a route, got ${JSON.stringify(args)}`);
        }
        return openOrActivate(openArgs, {
          find: id => tracker.find(widget => widget.id === id),
          create: options =>
            new DashboardWidget({
              ...options,
              baseUrl: settings.baseUrl,
              theme: dashboardTheme(themes),
              openPath
            }),
          attach: widget => {
            widget.title.icon = gpuIcon;
            shell.add(widget, 'main');
            void tracker.add(widget);
          },
          activate: widget => shell.activateById(widget.id)
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

    const sidebar = new DashboardSidebar({
      fetcher: createServerFetcher(settings),
      commands
    });
    sidebar.id = SIDEBAR_ID;
    sidebar.title.icon = gpuIcon;
    sidebar.title.caption = SIDEBAR_TITLE;
    shell.add(sidebar, 'left', { rank: 200 });
    restorer?.add(sidebar, SIDEBAR_ID);

    // One poll of glance.json (only while JupyterLab is visible) feeds the
    // status-bar item and the sidebar's bars and kernel list.
    const glance = new GlanceModel({ fetch: () => fetchGlance(settings) });
    const panel = new GlancePanel({
      model: glance,
      openPath,
      confirm: async (title, body) =>
        (
          await showDialog({
            title,
            body,
            buttons: [
              Dialog.cancelButton(),
              Dialog.warnButton({ label: 'Shut Down' })
            ]
          })
        ).button.accept,
      shutdownKernel: id => app.serviceManager.kernels.shutdown(id)
    });
    sidebar.node.append(panel.node);
    if (statusBar) {
      statusBar.registerStatusItem('nvdashboard:glance', {
        item: new GlanceStatusItem(glance, () => shell.activateById(SIDEBAR_ID)),
        align: 'left',
        rank: 100
      });
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
                category: PALETTE_CATEGORY
              })
            );
          }
        }
      });
    }
  }
};

export default plugin;
