/**
 * The pages' data socket (jupyterlab_nvdashboard/apps/stream_client.js),
 * shared by the Bokeh dashboards and the plain overview at `/`, run here in
 * the test DOM with a fake WebSocket: it is open only while the page is
 * shown, by the JupyterLab tab's word or by the frame's size.
 */
import * as fs from 'fs';
import * as path from 'path';

const SCRIPT = fs.readFileSync(
  path.resolve(__dirname, '../../jupyterlab_nvdashboard/apps/stream_client.js'),
  'utf8'
);

interface ILive {
  socket: FakeSocket | null;
  hidden: boolean;
  parentHidden: boolean;
  retryMs: number;
  connects: number;
}

class FakeSocket {
  static opened: FakeSocket[] = [];
  constructor(readonly url: string) {
    FakeSocket.opened.push(this);
  }
  binaryType = '';
  closed = false;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code: number }) => void) | null = null;
  close(): void {
    this.closed = true;
  }
  receive(data: unknown): void {
    this.onmessage?.({ data });
  }
}

type OpenStream = (
  live: ILive,
  url: () => string,
  onFrame: (data: unknown) => void
) => { reconnect: () => void };

function load(): OpenStream {
  return new Function('WebSocket', `${SCRIPT}\nreturn openStream;`)(
    FakeSocket
  ) as OpenStream;
}

function size(width: number, height: number): void {
  Object.defineProperty(window, 'innerWidth', {
    configurable: true,
    value: width
  });
  Object.defineProperty(window, 'innerHeight', {
    configurable: true,
    value: height
  });
}

function newLive(): ILive {
  return {
    socket: null,
    hidden: false,
    parentHidden: false,
    retryMs: 500,
    connects: 0
  };
}

describe('openStream', () => {
  beforeEach(() => {
    FakeSocket.opened = [];
    size(1280, 800);
  });

  it('closes when the frame is hidden after it was shown, and opens when shown, without a resize event', async () => {
    const live = newLive();
    const frames: unknown[] = [];
    load()(
      live,
      () => 'ws://host/page/stream',
      data => frames.push(data)
    );
    expect(FakeSocket.opened.length).toBe(1);
    const socket = FakeSocket.opened[0];
    socket.receive('one');
    expect(frames).toEqual(['one']);
    // The tab is put behind another: display:none, and no resize event.
    size(0, 0);
    socket.receive('two');
    expect(frames).toEqual(['one']); // not applied
    expect(live.hidden).toBe(true);
    expect(socket.closed).toBe(true);
    expect(live.socket).toBeNull();
    // Shown again, and again with no event: within a second it opens a new socket.
    size(1280, 800);
    await new Promise(resolve => setTimeout(resolve, 1100));
    expect(live.hidden).toBe(false);
    expect(FakeSocket.opened.length).toBe(2);
  });

  it("follows the JupyterLab tab's word (the visibility handshake)", () => {
    const live = newLive();
    load()(
      live,
      () => 'ws://host/stream',
      () => undefined
    );
    const say = (visible: boolean): void => {
      window.dispatchEvent(
        new MessageEvent('message', {
          data: { type: 'nvdashboard:visibility', visible },
          source: window.parent,
          origin: window.location.origin
        })
      );
    };
    const first = live.socket as FakeSocket;
    say(false);
    expect(live.hidden).toBe(true);
    expect(first.closed).toBe(true);
    say(true);
    expect(live.hidden).toBe(false);
    expect(live.connects).toBe(2);
  });
});

describe('the overview at /', () => {
  it('uses the same stream client, handshake included', () => {
    const overview = fs.readFileSync(
      path.resolve(__dirname, '../../jupyterlab_nvdashboard/apps/overview.py'),
      'utf8'
    );
    const root = overview.slice(overview.indexOf('ROOT_SCRIPT = """'));
    expect(root).toContain('STREAM_CLIENT_JS');
    expect(root).toContain('openStream(live, url, onFrame)');
    expect(root).not.toContain('new WebSocket');
  });
});
