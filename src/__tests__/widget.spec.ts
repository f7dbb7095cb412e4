import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { DashboardWidget } from '../widget';

describe('DashboardWidget', () => {
  function make(baseUrl = '/user/alice/'): DashboardWidget {
    return new DashboardWidget({
      route: '/GPU-Utilization',
      label: 'GPU Utilization',
      baseUrl,
      theme: 'dark'
    });
  }

  it('wraps a sandboxed iframe on the proxied, themed dashboard URL', () => {
    const widget = make();
    expect(widget.id).toBe('nvdashboard-GPU-Utilization');
    expect(widget.hasClass('nvdashboard-widget')).toBe(true);
    expect(widget.title.label).toBe('GPU Utilization');
    expect(widget.content.url).toBe('/user/alice/nvdashboard/GPU-Utilization?theme=dark');
    expect(widget.content.sandbox).toEqual(['allow-scripts', 'allow-same-origin']);
    const iframe = widget.content.node.querySelector('iframe')!;
    expect(iframe.getAttribute('sandbox')).toBe('allow-scripts allow-same-origin');
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
      [{ type: 'nvdashboard:visibility', visible: false }, window.location.origin],
      [{ type: 'nvdashboard:visibility', visible: true }, window.location.origin]
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
      window.dispatchEvent(new MessageEvent('message', { data, source, origin }));
    const ask = { type: 'nvdashboard:open-notebook', path: 'work/a.ipynb' };
    send(ask, page, window.location.origin);
    send(ask, window, window.location.origin); // not this tab's page
    send(ask, page, 'http://evil.example'); // another origin
    send({ type: 'nvdashboard:open-notebook', path: 42 }, page, window.location.origin);
    expect(opened).toEqual(['work/a.ipynb']);
    await new Promise(resolve => setTimeout(resolve, 0));
    widget.dispose();
  });
});
