import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { DashboardWidget, isNotebookPath } from '../dashboards/widget';

/** What the widget posts to its page from now on. */
function postedTo(widget: DashboardWidget): unknown[] {
  const page = widget.content.node.querySelector('iframe')!.contentWindow!;
  const posted: unknown[] = [];
  jest.spyOn(page, 'postMessage').mockImplementation((message: unknown) => {
    posted.push(message);
  });
  return posted;
}

/** The page loads, then asks whether it is shown. */
function loadAndAsk(widget: DashboardWidget): void {
  const iframe = widget.content.node.querySelector('iframe')!;
  iframe.dispatchEvent(new Event('load'));
  window.dispatchEvent(
    new MessageEvent('message', {
      data: { type: 'nvdashboard:visibility-request' },
      source: iframe.contentWindow,
      origin: window.location.origin
    })
  );
}

describe('DashboardWidget', () => {
  function make(baseUrl = '/user/alice/'): DashboardWidget {
    return new DashboardWidget({
      route: '/GPU-Utilization',
      label: 'GPU Utilization',
      baseUrl,
      theme: 'dark'
    });
  }

  it('wraps an iframe (no sandbox that would isolate nothing) on the proxied, themed dashboard URL', () => {
    const widget = make();
    expect(widget.id).toBe('nvdashboard-GPU-Utilization');
    expect(widget.hasClass('nvdashboard-widget')).toBe(true);
    expect(widget.title.label).toBe('GPU Utilization');
    expect(widget.content.url).toBe(
      '/user/alice/nvdashboard/GPU-Utilization?theme=dark'
    );
    const iframe = widget.content.node.querySelector('iframe')!;
    expect(iframe.hasAttribute('sandbox')).toBe(false);
    widget.dispose();
  });

  it('follows theme changes, reloading only when the URL changes', () => {
    const widget = make('http://host:8888/lab-prefix/');
    const iframe = widget.content.node.querySelector('iframe')!;
    widget.setTheme('light');
    expect(iframe.getAttribute('src')).toBe(
      'http://host:8888/lab-prefix/nvdashboard/GPU-Utilization?theme=light'
    );
    const spy = jest.spyOn(iframe, 'setAttribute');
    widget.setTheme('light');
    expect(spy).not.toHaveBeenCalled();
    widget.dispose();
  });

  it('tells its page when it is hidden and shown, same origin only', async () => {
    const widget = make();
    Widget.attach(widget, document.body);
    const page = widget.content.node.querySelector('iframe')!.contentWindow!;
    const posted: Array<[unknown, string]> = [];
    jest
      .spyOn(page, 'postMessage')
      .mockImplementation((message: unknown, origin?: unknown) => {
        posted.push([message, origin as string]);
      });
    widget.hide();
    MessageLoop.flush();
    expect(widget.pageVisible).toBe(false);
    widget.show();
    MessageLoop.flush();
    expect(widget.pageVisible).toBe(true);
    expect(posted).toEqual([
      [
        { type: 'nvdashboard:visibility', visible: false },
        window.location.origin
      ],
      [
        { type: 'nvdashboard:visibility', visible: true },
        window.location.origin
      ]
    ]);
    // Showing restarts the toolbar's resize throttler in a promise; let that settle, or it
    // fires after dispose() and fails the run.
    await new Promise(resolve => setTimeout(resolve, 0));
    widget.dispose();
  });

  it('opens a notebook its own page asks for, and ignores other senders', async () => {
    const opened: string[] = [];
    const widget = new DashboardWidget({
      route: '/GPU-Processes',
      label: 'GPU Processes',
      baseUrl: '/user/alice/',
      theme: 'light',
      openPath: path => opened.push(path)
    });
    Widget.attach(widget, document.body);
    const page = widget.content.node.querySelector('iframe')!.contentWindow!;
    const send = (data: unknown, source: Window | null, origin: string) =>
      window.dispatchEvent(
        new MessageEvent('message', { data, source, origin })
      );
    const ask = { type: 'nvdashboard:open-notebook', path: 'work/a.ipynb' };
    send(ask, page, window.location.origin);
    send(ask, window, window.location.origin); // not this tab's page
    send(ask, page, 'http://evil.example'); // another origin
    send(
      { type: 'nvdashboard:open-notebook', path: 42 },
      page,
      window.location.origin
    );
    expect(opened).toEqual(['work/a.ipynb']);
    await new Promise(resolve => setTimeout(resolve, 0));
    widget.dispose();
  });

  it('tells its page again when the page loads, and when the page asks', async () => {
    const widget = make();
    Widget.attach(widget, document.body);
    const posted = postedTo(widget);
    widget.hide();
    MessageLoop.flush();
    loadAndAsk(widget);
    expect(posted).toEqual([
      { type: 'nvdashboard:visibility', visible: false },
      { type: 'nvdashboard:visibility', visible: false },
      { type: 'nvdashboard:visibility', visible: false }
    ]);
    await new Promise(resolve => setTimeout(resolve, 0));
    widget.dispose();
  });

  it('tells a page whose tab was attached in the background that it is hidden', async () => {
    const widget = make();
    widget.hide(); // a tab opened behind another (a dock panel hides it first)
    Widget.attach(widget, document.body);
    MessageLoop.flush();
    const posted = postedTo(widget);
    loadAndAsk(widget);
    expect(widget.pageVisible).toBe(false);
    expect(posted).toEqual([
      { type: 'nvdashboard:visibility', visible: false },
      { type: 'nvdashboard:visibility', visible: false }
    ]);
    widget.show();
    MessageLoop.flush();
    expect(posted[posted.length - 1]).toEqual({
      type: 'nvdashboard:visibility',
      visible: true
    });
    await new Promise(resolve => setTimeout(resolve, 0));
    widget.dispose();
  });

  it('ignores a message with a null source, even when the iframe has no window', async () => {
    const opened: string[] = [];
    const widget = new DashboardWidget({
      route: '/GPU-Processes',
      label: 'GPU Processes',
      baseUrl: '/user/alice/',
      theme: 'light',
      openPath: path => opened.push(path)
    });
    // Not attached: the iframe has no window, so contentWindow is null.
    expect(
      widget.content.node.querySelector('iframe')!.contentWindow
    ).toBeNull();
    window.dispatchEvent(
      new MessageEvent('message', {
        data: { type: 'nvdashboard:open-notebook', path: 'work/a.ipynb' },
        source: null,
        origin: window.location.origin
      })
    );
    expect(opened).toEqual([]);
    widget.dispose();
  });

  it('opens only paths shaped like files on this server', async () => {
    const opened: string[] = [];
    const widget = new DashboardWidget({
      route: '/GPU-Processes',
      label: 'GPU Processes',
      baseUrl: '/user/alice/',
      theme: 'light',
      openPath: path => opened.push(path)
    });
    Widget.attach(widget, document.body);
    const page = widget.content.node.querySelector('iframe')!.contentWindow!;
    for (const path of [
      '../../etc/passwd',
      '/etc/passwd',
      'a//b.ipynb',
      'a/./b',
      'https://x/y',
      'ok/b.ipynb'
    ]) {
      window.dispatchEvent(
        new MessageEvent('message', {
          data: { type: 'nvdashboard:open-notebook', path },
          source: page,
          origin: window.location.origin
        })
      );
    }
    expect(opened).toEqual(['ok/b.ipynb']);
    expect(isNotebookPath('notes\u0000.ipynb')).toBe(false);
    expect(isNotebookPath('a\\b.ipynb')).toBe(false);
    expect(isNotebookPath('Untitled 1.ipynb')).toBe(true);
    await new Promise(resolve => setTimeout(resolve, 0));
    widget.dispose();
  });
});
