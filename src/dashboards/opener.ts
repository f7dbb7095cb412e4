/**
 * Open-or-activate: the one rule behind `nvdashboard:open`. A route has at
 * most one tab; opening it again brings the existing tab to the front.
 *
 * Kept free of JupyterLab classes so it can be unit-tested with plain
 * Lumino widgets.
 */
import { Widget } from '@lumino/widgets';

import { IOpenArgs, ITimeRange } from '../shared/tokens';
import { widgetId } from '../shared/urls';

/** How the opener reaches the application. */
export interface IOpenerHost<T extends Widget> {
  /** The open widget with this id, if any (e.g. from a WidgetTracker). */
  find(id: string): T | undefined;
  /** Build a new dashboard widget; it must carry the given id. */
  create(args: IOpenArgs, id: string): T;
  /** Put a new widget into the shell (and the tracker). */
  attach(widget: T): void;
  /** Bring a widget to the front. */
  activate(widget: T): void;
  /**
   * Point an open widget at what `args` ask for now (a time range, or none:
   * follow now) before it comes to the front.
   */
  update?(widget: T, args: IOpenArgs): void;
}

/** What `openOrActivate` did. */
export interface IOpenResult<T extends Widget> {
  widget: T;
  created: boolean;
}

/** Activate the route's open tab, or create, attach and activate a new one. */
export function openOrActivate<T extends Widget>(
  args: IOpenArgs,
  host: IOpenerHost<T>
): IOpenResult<T> {
  const id = widgetId(args.route);
  const existing = host.find(id);
  if (existing && !existing.isDisposed) {
    host.update?.(existing, args);
    host.activate(existing);
    return { widget: existing, created: false };
  }
  const widget = host.create(args, id);
  if (widget.id !== id) {
    widget.id = id;
  }
  host.attach(widget);
  host.activate(widget);
  return { widget, created: true };
}

/**
 * A time range from untyped arguments: finite, start not after end; else
 * null. Its GPUs are the strings of `gpus` (the server checks them).
 */
export function toTimeRange(value: unknown): ITimeRange | null {
  const r = (value ?? {}) as Record<string, unknown>;
  const start = r.start_s;
  const end = r.end_s;
  if (
    typeof start !== 'number' ||
    typeof end !== 'number' ||
    !Number.isFinite(start) ||
    !Number.isFinite(end) ||
    start > end
  ) {
    return null;
  }
  const gpus = Array.isArray(r.gpus)
    ? r.gpus.filter((g): g is string => typeof g === 'string' && g !== '')
    : [];
  return {
    start_s: start,
    end_s: end,
    label: typeof r.label === 'string' ? r.label : '',
    ...(gpus.length ? { gpus } : {})
  };
}

/** Validate untyped command arguments into `IOpenArgs`. */
export function toOpenArgs(args: { [key: string]: unknown }): IOpenArgs | null {
  const route = args.route;
  if (typeof route !== 'string' || !route.replace(/\//g, '')) {
    return null;
  }
  const label =
    typeof args.label === 'string' && args.label
      ? args.label
      : route.replace(/^\/+/, '').replace(/-/g, ' ');
  const range = toTimeRange(args.range);
  return range ? { route, label, range } : { route, label };
}
