/** Test doubles shared by the specs. */
import { MessageLoop } from '@lumino/messaging';
import { PanelLayout, Widget } from '@lumino/widgets';

import { CellGpuFooter } from '../cells/cellFooter';
import { IFooterCell } from '../cells/notebookFooters';
import { IDashboardFetcher } from '../shared/tokens';

export type Answer = unknown | Error;

/**
 * A fetcher that answers from queues; the last answer of a queue repeats.
 * Errors in a queue are thrown as rejections.
 */
export class FakeFetcher implements IDashboardFetcher {
  constructor(index: Answer[], info: Answer[] = [DEFAULT_INFO]) {
    this.indexAnswers = index;
    this.infoAnswers = info;
  }

  indexAnswers: Answer[];
  infoAnswers: Answer[];
  indexCalls = 0;
  infoCalls = 0;

  fetchIndex(): Promise<unknown> {
    return answer(this.indexAnswers, this.indexCalls++);
  }

  fetchInfo(): Promise<unknown> {
    return answer(this.infoAnswers, this.infoCalls++);
  }
}

function answer(queue: Answer[], call: number): Promise<unknown> {
  const value = queue[Math.min(call, queue.length - 1)];
  return value instanceof Error
    ? Promise.reject(value)
    : Promise.resolve(value);
}

export const DEFAULT_INFO = {
  version: '2026.12.0',
  nvml_state: 'ok',
  nvml_message: '',
  simulated: false,
  gpu_count: 1,
  devices: [{ index: 0, name: 'NVIDIA H200' }],
  interval_s: 0.2,
  history_s: 1800
};

/** Resolve once `predicate` holds, polling every few milliseconds. */
export async function waitFor(
  predicate: () => boolean,
  timeoutMs = 10000
): Promise<void> {
  const start = Date.now();
  while (!predicate()) {
    if (Date.now() - start > timeoutMs) {
      throw new Error('waitFor timed out');
    }
    await new Promise(resolve => setTimeout(resolve, 5));
  }
}

/**
 * What a live region says from now on: its text at each change (what a
 * screen reader would announce). `await` a microtask before reading.
 */
export function announcements(live: Node): {
  said: string[];
  stop: () => void;
} {
  const said: string[] = [];
  const observer = new MutationObserver(() =>
    said.push(live.textContent ?? '')
  );
  observer.observe(live, {
    childList: true,
    characterData: true,
    subtree: true
  });
  return { said, stop: () => observer.disconnect() };
}

/**
 * Await `promise`, then run the views' pending updates (Lumino draws a
 * widget at the next animation frame; a test looks right away).
 */
export async function settled<T>(promise: Promise<T>): Promise<T> {
  const value = await promise;
  MessageLoop.flush();
  return value;
}

/** A cell widget as a notebook has it: a panel layout and a model with metadata. */
export function cell(
  id: string
): IFooterCell & { metadata: Map<string, unknown> } {
  const widget = new Widget();
  widget.layout = new PanelLayout();
  const metadata = new Map<string, unknown>();
  Object.assign(widget, {
    metadata,
    model: {
      id,
      getMetadata: (key: string) => metadata.get(key),
      setMetadata: (key: string, value: unknown) => metadata.set(key, value),
      deleteMetadata: (key: string) => metadata.delete(key)
    }
  });
  return widget as unknown as IFooterCell & { metadata: Map<string, unknown> };
}

export function footerOf(c: IFooterCell): CellGpuFooter | undefined {
  return (c.layout as PanelLayout).widgets.find(
    w => w instanceof CellGpuFooter
  ) as CellGpuFooter | undefined;
}
