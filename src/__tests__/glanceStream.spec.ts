/**
 * The glance over its socket (`glance/stream`): once glance.json has
 * answered, the socket brings each changed glance and the poll stands by;
 * the socket closes while JupyterLab is hidden and the poll asks afresh
 * when it is shown; a socket that closes or never brings anything leaves
 * the poll's retry and backoff in charge. The socket is a fake that the
 * test speaks through, as the server would.
 */
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { GlanceModel } from '../glance/glanceModel';
import { IGlanceStreamHandlers } from '../shared/fetcher';
import { GlancePanel } from '../glance/glancePanel';
import { FetchError } from '../shared/errors';
import { GlanceStatusItem } from '../glance/statusItem';
import { waitFor } from './fakes';

const GIB = 2 ** 30;

function glance(
  utilizations: number[],
  time = 1_800_000_000
): Record<string, unknown> {
  return {
    time,
    devices: utilizations.map((pct, index) => ({
      index,
      label: `GPU ${index}`,
      kind: 'gpu',
      utilization_pct: pct,
      memory_used_bytes: 20 * GIB,
      memory_total_bytes: 80 * GIB,
      mine: index === 1
    })),
    kernels: [
      {
        kernel_id: 'k1',
        path: 'work/a.ipynb',
        memory_bytes: 3 * GIB,
        memory_known: true,
        devices: ['GPU 1']
      }
    ],
    diagnoses: []
  };
}

class FakeSocket {
  constructor(
    readonly intervalMs: number,
    readonly handlers: IGlanceStreamHandlers
  ) {}
  closed = false;
  close(): void {
    this.closed = true;
  }
  /** The server's heartbeat. */
  beat(): void {
    this.handlers.alive();
  }
  /** The server sends `body`. */
  send(body: unknown): void {
    this.handlers.message(body);
    MessageLoop.flush();
  }
  /** The server (or the proxy) closes it. */
  drop(): void {
    this.closed = true;
    this.handlers.closed();
  }
}

interface IHarness {
  m: GlanceModel;
  sockets: FakeSocket[];
  fetches: () => number;
  answers: unknown[];
  clock: { now: number };
}

/** A model polling every 10 ms whose fetch answers from `answers` (the last repeats). */
function harness(answers: unknown[]): IHarness {
  const sockets: FakeSocket[] = [];
  const clock = { now: 0 };
  let fetches = 0;
  const h: IHarness = {
    sockets,
    answers,
    clock,
    fetches: () => fetches,
    m: new GlanceModel({
      fetch: () => {
        const answer = h.answers[Math.min(fetches++, h.answers.length - 1)];
        return answer instanceof Error
          ? Promise.reject(answer)
          : Promise.resolve(answer);
      },
      connect: (intervalMs, handlers) => {
        const socket = new FakeSocket(intervalMs, handlers);
        sockets.push(socket);
        return socket;
      },
      interval: 10,
      now: () => clock.now
    })
  };
  return h;
}

function setVisibility(state: 'hidden' | 'visible'): void {
  Object.defineProperty(document, 'visibilityState', {
    configurable: true,
    get: () => state
  });
  document.dispatchEvent(new Event('visibilitychange'));
}

const settle = (ms: number): Promise<void> =>
  new Promise(resolve => setTimeout(resolve, ms));

afterEach(() => setVisibility('visible'));

describe('the glance socket', () => {
  it('takes the glance from the socket once glance.json answered, and stops polling', async () => {
    const { m, sockets, fetches } = harness([glance([40, 80])]);
    m.use('sidebar', true);
    await waitFor(() => sockets.length === 1);
    // At the pace its users need.
    expect(sockets[0].intervalMs).toBe(10);
    expect(m.glance?.devices[0].utilization_pct).toBe(40);
    sockets[0].send(glance([55, 80], 1_800_000_002));
    expect(m.glance?.devices[0].utilization_pct).toBe(55);
    expect(m.state.glance?.time).toBe(1_800_000_002);
    expect(m.streaming).toBe(true);
    // Twenty intervals: the poll stands by, nothing is fetched.
    const before = fetches();
    for (let i = 0; i < 20; i++) {
      await settle(10);
      sockets[0].send(glance([55 + i, 80]));
    }
    expect(fetches()).toBe(before);
    expect(m.glance?.devices[0].utilization_pct).toBe(74);
    // A kernel shut down: refresh() still asks the server itself.
    expect(await m.refresh()).toBe('ok');
    expect(fetches()).toBe(before + 1);
    // Nobody uses it any more: the socket closes.
    m.use('sidebar', false);
    expect(sockets[0].closed).toBe(true);
    m.dispose();
  });

  it('re-renders only what changed', async () => {
    const { m, sockets } = harness([glance([40, 80])]);
    const item = new GlanceStatusItem({
      model: m,
      onActivate: () => undefined
    });
    const panel = new GlancePanel({
      model: m,
      confirm: () => Promise.resolve(true),
      shutdownKernel: () => Promise.resolve()
    });
    Widget.attach(item, document.body);
    Widget.attach(panel, document.body);
    await waitFor(() => sockets.length === 1);
    MessageLoop.flush();
    const renders = panel.renderCount;
    const changed: Node[] = [];
    const observer = new MutationObserver(records =>
      records.forEach(record => changed.push(record.target))
    );
    observer.observe(document.body, {
      subtree: true,
      childList: true,
      attributes: true,
      characterData: true
    });
    const flushMutations = async (): Promise<Node[]> => {
      await Promise.resolve();
      return changed.splice(0, changed.length);
    };

    // The same glance again (the server's keepalive, the same reading): nothing drawn.
    sockets[0].send(glance([40, 80]));
    expect(panel.renderCount).toBe(renders);
    // The item told the same thing again writes nothing either.
    item.figure = 'summary';
    expect(await flushMutations()).toEqual([]);

    // GPU 0's utilization moves: its meter, and the item's tooltip, and nothing else.
    sockets[0].send(glance([41, 80]));
    expect(panel.renderCount).toBe(renders + 1);
    const touched = await flushMutations();
    expect(touched.length).toBeGreaterThan(0);
    const row0 = panel.node.querySelector(
      '.nvdashboard-glance-device[data-index="0"]'
    )!;
    for (const node of touched) {
      expect(row0.contains(node) || node === item.node).toBe(true);
    }
    expect(item.node.title).toContain('GPU 0: 41%');
    observer.disconnect();
    item.dispose();
    panel.dispose();
    m.dispose();
  });

  it('closes while JupyterLab is hidden, and asks afresh when it is shown', async () => {
    const { m, sockets, fetches } = harness([glance([40, 80])]);
    m.use('status', true);
    await waitFor(() => sockets.length === 1);
    sockets[0].send(glance([45, 80]));
    setVisibility('hidden');
    expect(sockets[0].closed).toBe(true);
    const hiddenAt = fetches();
    await settle(100); // ten intervals
    expect(fetches()).toBe(hiddenAt);
    expect(sockets.length).toBe(1);
    // Shown: a fresh answer at once, then the socket again.
    setVisibility('visible');
    await waitFor(() => fetches() === hiddenAt + 1);
    await waitFor(() => sockets.length === 2);
    expect(sockets[1].closed).toBe(false);
    m.dispose();
    expect(sockets[1].closed).toBe(true);
  });

  it('hands back to the poll, with its retries, when the socket closes', async () => {
    const down = new FetchError(502, 'Bad Gateway');
    const h = harness([glance([40, 80])]);
    const { m, sockets, fetches } = h;
    m.use('status', true);
    await waitFor(() => sockets.length === 1);
    sockets[0].send(glance([45, 80]));
    // The server goes away: the poll asks at once and says the reading is stale.
    h.answers = [down];
    const before = fetches();
    sockets[0].drop();
    await waitFor(() => fetches() > before);
    await waitFor(() => m.stale);
    expect(m.poller.outcome).toBe('retry');
    expect(m.state.glance?.devices[0].utilization_pct).toBe(45);
    // No socket while the server does not answer.
    await waitFor(() => fetches() >= before + 2);
    expect(sockets.length).toBe(1);
    m.dispose();
  });

  it('tries a socket that never brought anything again only after longer waits', async () => {
    const h = harness([glance([40, 80])]);
    const { m, sockets, fetches, clock } = h;
    m.use('status', true);
    await waitFor(() => sockets.length === 1);
    // A proxy that does not pass websockets: closed before any message.
    sockets[0].drop();
    const after = fetches();
    // The poll carries on at its interval, with no new socket until the wait
    // (two intervals on the model's clock) has passed.
    await waitFor(() => fetches() >= after + 5);
    expect(sockets.length).toBe(1);
    expect(m.live).toBe(true);
    clock.now = 25;
    await waitFor(() => sockets.length === 2);
    sockets[1].drop(); // again: four intervals now
    clock.now = 50;
    const later = fetches();
    await waitFor(() => fetches() >= later + 5);
    expect(sockets.length).toBe(2);
    clock.now = 70;
    await waitFor(() => sockets.length === 3);
    // One that brings a glance starts the count again.
    sockets[2].send(glance([50, 80]));
    expect(m.streaming).toBe(true);
    m.dispose();
  });

  it('counts a socket the browser refuses to open as one that closed', async () => {
    let attempts = 0;
    let fetches = 0;
    const m = new GlanceModel({
      fetch: () => (fetches++, Promise.resolve(glance([40, 80]))),
      connect: () => {
        attempts++;
        throw new SyntaxError('The URL is invalid');
      },
      interval: 10,
      now: () => 0
    });
    m.use('status', true);
    await waitFor(() => fetches >= 5);
    // Tried once; the poll carries on, its readings shown.
    expect(attempts).toBe(1);
    expect(m.live).toBe(true);
    expect(m.poller.outcome).toBe('ok');
    m.dispose();
  });

  it('keeps a socket that beats, and closes one that falls silent, and the poll asks', async () => {
    const sockets: FakeSocket[] = [];
    let fetches = 0;
    const m = new GlanceModel({
      fetch: () => (fetches++, Promise.resolve(glance([40, 80]))),
      connect: (intervalMs, handlers) => {
        const socket = new FakeSocket(intervalMs, handlers);
        sockets.push(socket);
        return socket;
      },
      interval: 10,
      silenceMs: 500
    });
    m.use('status', true);
    await waitFor(() => sockets.length === 1);
    sockets[0].send(glance([45, 80]));
    // Heartbeats (ticks with nothing new) keep it open past its silence limit.
    for (let i = 0; i < 40; i++) {
      await settle(20);
      sockets[0].beat();
    }
    expect(sockets[0].closed).toBe(false);
    expect(m.streaming).toBe(true);
    const before = fetches;
    await waitFor(() => sockets[0].closed);
    await waitFor(() => fetches > before);
    m.dispose();
  });
});
