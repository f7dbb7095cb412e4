import { Widget } from '@lumino/widgets';

import { IOpenerHost, openOrActivate, toOpenArgs } from '../dashboards/opener';
import { IOpenArgs } from '../shared/tokens';

class FakeShell implements IOpenerHost<Widget> {
  widgets = new Map<string, Widget>();
  created: IOpenArgs[] = [];
  activated: string[] = [];

  find(id: string): Widget | undefined {
    return this.widgets.get(id);
  }
  create(args: IOpenArgs, id: string): Widget {
    this.created.push(args);
    const widget = new Widget();
    widget.id = id;
    widget.title.label = args.label;
    return widget;
  }
  attach(widget: Widget): void {
    this.widgets.set(widget.id, widget);
    widget.disposed.connect(() => this.widgets.delete(widget.id));
  }
  activate(widget: Widget): void {
    this.activated.push(widget.id);
  }
}

describe('openOrActivate', () => {
  it('creates a widget with a stable id on first open', () => {
    const shell = new FakeShell();
    const result = openOrActivate(
      { route: '/GPU-Utilization', label: 'GPU Utilization' },
      shell
    );
    expect(result.created).toBe(true);
    expect(result.widget.id).toBe('nvdashboard-GPU-Utilization');
    expect(shell.activated).toEqual(['nvdashboard-GPU-Utilization']);
  });

  it('activates the existing tab instead of opening a second one', () => {
    const shell = new FakeShell();
    const args = { route: '/GPU-Utilization', label: 'GPU Utilization' };
    const first = openOrActivate(args, shell);
    const second = openOrActivate(args, shell);
    // Same route spelled without the slash is the same tab.
    const third = openOrActivate({ ...args, route: 'GPU-Utilization' }, shell);
    expect(second).toEqual({ widget: first.widget, created: false });
    expect(third.widget).toBe(first.widget);
    expect(shell.created).toHaveLength(1);
    expect(shell.activated).toHaveLength(3);
  });

  it('opens separate tabs for separate routes', () => {
    const shell = new FakeShell();
    openOrActivate(
      { route: '/GPU-Utilization', label: 'GPU Utilization' },
      shell
    );
    openOrActivate({ route: '/GPU-Memory', label: 'GPU Memory' }, shell);
    expect([...shell.widgets.keys()]).toEqual([
      'nvdashboard-GPU-Utilization',
      'nvdashboard-GPU-Memory'
    ]);
  });

  it('opens a new tab after the old one was closed', () => {
    const shell = new FakeShell();
    const args = { route: '/GPU-Memory', label: 'GPU Memory' };
    const first = openOrActivate(args, shell);
    first.widget.dispose();
    const again = openOrActivate(args, shell);
    expect(again.created).toBe(true);
    expect(again.widget).not.toBe(first.widget);
  });

  it('never reuses a disposed widget the host still reports', () => {
    const shell = new FakeShell();
    const stale = new Widget();
    stale.id = 'nvdashboard-GPU-Memory';
    stale.dispose();
    shell.find = () => stale;
    const result = openOrActivate(
      { route: '/GPU-Memory', label: 'GPU Memory' },
      shell
    );
    expect(result.created).toBe(true);
  });
});

describe('toOpenArgs', () => {
  it('validates command arguments', () => {
    expect(toOpenArgs({ route: '/GPU-Memory', label: 'GPU Memory' })).toEqual({
      route: '/GPU-Memory',
      label: 'GPU Memory'
    });
    expect(toOpenArgs({ route: '/GPU-Memory' })).toEqual({
      route: '/GPU-Memory',
      label: 'GPU Memory'
    });
    expect(toOpenArgs({})).toBeNull();
    expect(toOpenArgs({ route: 3 })).toBeNull();
    expect(toOpenArgs({ route: '/' })).toBeNull();
  });
});
