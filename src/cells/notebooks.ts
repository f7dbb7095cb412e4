/**
 * GPU per cell, wired into each open notebook: a span watcher on its
 * kernel's messages, its cell footers, and its toolbar item. The footers
 * ask only while the notebook is on screen: its panel shown (a background
 * tab is not) and the browser page visible.
 */
import { NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { IMessageHandler, Message, MessageLoop } from '@lumino/messaging';

import { NotebookCellFooters } from './notebookFooters';
import { FooterHints } from './footerHint';
import { CellFooterMode, FetchCellReport } from './cellReport';
import { CellSpanWatcher, IKernelLike } from './cellSpans';
import { GlanceModel } from '../glance/glanceModel';
import { IIdleThresholds } from '../glance/idleRule';
import { KernelGpuItem } from '../glance/notebookToolbar';
import { ITimeRange } from '../shared/tokens';

/** The toolbar item's name in a notebook's toolbar. */
export const TOOLBAR_ITEM_NAME = 'nvdashboard-kernel-gpu';

/** The settings the notebook parts follow. */
export interface INotebookGpuSettings {
  cellFooter: CellFooterMode;
  saveCellFooter: boolean;
  toolbarItem: boolean;
  idleThresholds: IIdleThresholds;
}

export namespace NotebookGpu {
  export interface IOptions {
    glance: GlanceModel;
    fetchReport: FetchCellReport;
    open: (range: ITimeRange) => void;
    settings: INotebookGpuSettings;
    trans: TranslationBundle;
    /** The Lab's hint about footers a reload dropped (footerHint.ts). */
    hints?: FooterHints;
  }
}

/** One notebook's GPU parts (see the module comment). */
export class NotebookGpu {
  constructor(panel: NotebookPanel, options: NotebookGpu.IOptions) {
    this._panel = panel;
    const { settings, hints } = options;
    // The path it was opened as: its other views are counted under it.
    this._openedAs = panel.context.path;
    const firstView = hints?.opened(this._openedAs) ?? false;
    this.footers = new NotebookCellFooters({
      cells: () => panel.content.widgets,
      fetchReport: options.fetchReport,
      open: options.open,
      // The shared glance's last answer: no GPU here, or no dashboard server.
      nothingToJudge: () => options.glance.stuck,
      mode: settings.cellFooter,
      save: settings.saveCellFooter,
      visible: this._onScreen(),
      trans: options.trans,
      footerShown: hints
        ? cellId => void hints.footerShown(panel.context.path, cellId)
        : undefined,
      live: options.glance
    });
    const session = panel.sessionContext;
    this.item = new KernelGpuItem({
      model: options.glance,
      kernelId: () => session.session?.kernel?.id ?? null,
      trans: options.trans
    });
    this._hints = hints;
    this.apply(settings);
    if (!panel.toolbar.insertAfter('spacer', TOOLBAR_ITEM_NAME, this.item)) {
      panel.toolbar.addItem(TOOLBAR_ITEM_NAME, this.item);
    }
    session.kernelChanged.connect(this._watchKernel, this);
    session.statusChanged.connect(this._onKernelStatus, this);
    this._watchKernel();
    MessageLoop.installMessageHook(panel, this._hook);
    document.addEventListener('visibilitychange', this._onVisibility);
    void panel.context.ready.then(() => {
      this.footers.restoreSaved();
      if (hints && firstView && !this._disposed) {
        this._hintDropped(hints);
      }
    });
    panel.disposed.connect(() => this.dispose());
  }

  readonly footers: NotebookCellFooters;
  readonly item: KernelGpuItem;

  apply(settings: INotebookGpuSettings): void {
    this.footers.mode = settings.cellFooter;
    this.footers.save = settings.saveCellFooter;
    this.item.enabled = settings.toolbarItem;
    this.item.idleThresholds = settings.idleThresholds;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._hints?.closed(this._openedAs);
    MessageLoop.removeMessageHook(this._panel, this._hook);
    document.removeEventListener('visibilitychange', this._onVisibility);
    this._panel.sessionContext.kernelChanged.disconnect(
      this._watchKernel,
      this
    );
    this._panel.sessionContext.statusChanged.disconnect(
      this._onKernelStatus,
      this
    );
    this._watcher?.dispose();
    this.footers.dispose();
    this.item.dispose();
  }

  /**
   * Opened again after a reload (or a close) dropped footers it showed: the
   * hint in the first one's place, where footers are on and not saved.
   */
  private _hintDropped(hints: FooterHints): void {
    const footers = this.footers;
    const wanted = (): boolean => footers.mode !== 'off' && !footers.save;
    const cells = this._panel.content.widgets.map(cell => cell.model.id);
    void hints
      .hintFor(this._panel.context.path, cells, wanted())
      .then(cellId => {
        if (cellId !== null && !this._disposed && wanted()) {
          footers.showHint(cellId, hints.createHint());
        }
      });
  }

  private _onScreen(): boolean {
    return this._panel.isVisible && document.visibilityState !== 'hidden';
  }

  private _watchKernel(): void {
    this._watcher?.dispose();
    this._watcher = null;
    this.footers.kernelGone();
    const kernel = this._panel.sessionContext.session?.kernel;
    if (kernel) {
      this._watcher = new CellSpanWatcher(kernel as unknown as IKernelLike);
      this._watcher.started.connect((_, id) => this.footers.cellStarted(id));
      this._watcher.running.connect((_, run) => this.footers.cellRunning(run));
      this._watcher.ended.connect((_, span) => this.footers.cellEnded(span));
    }
    this.item.refresh();
  }

  /** A restart or a dead kernel ends every cell it ran, with no reply. */
  private _onKernelStatus(_: unknown, status: string): void {
    if (
      status === 'restarting' ||
      status === 'autorestarting' ||
      status === 'dead'
    ) {
      this.footers.kernelGone();
    }
  }

  private _hook = (_: IMessageHandler, msg: Message): boolean => {
    switch (msg.type) {
      case 'after-show':
      case 'after-attach':
      case 'after-hide':
        // Lumino sets the panel's flags before these reach the hook's
        // caller; read them once the message has run.
        void Promise.resolve().then(() => this._onVisibility());
        break;
      case 'before-detach':
        this.footers.visible = false;
        break;
    }
    return true;
  };

  private _onVisibility = (): void => {
    if (!this._disposed) {
      this.footers.visible = this._onScreen();
    }
  };

  private _panel: NotebookPanel;
  private _openedAs: string;
  private _hints: FooterHints | undefined;
  private _watcher: CellSpanWatcher | null = null;
  private _disposed = false;
}
