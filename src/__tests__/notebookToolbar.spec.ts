/**
 * The notebook toolbar's GPU item: the kernel's GPU in the sidebar's and
 * status bar's words, from the shared glance poll, read only while shown;
 * and the open command's time range (the footer's click).
 */
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { parseGlance } from '../glance/glance';
import { GlanceModel } from '../glance/glanceModel';
import { kernelGpuWords, KernelGpuItem } from '../glance/notebookToolbar';
import { openOrActivate, toOpenArgs } from '../dashboards/opener';
import { cellReportUrl, dashboardUrl } from '../shared/urls';

const GIB = 2 ** 30;
const THRESHOLDS = { minBytes: GIB, idleSeconds: 30 * 60 };

const GLANCE = {
  devices: [
    {
      index: 0,
      label: 'GPU 0',
      kind: 'gpu',
      utilization_pct: 10,
      memory_used_bytes: 2 * GIB,
      memory_total_bytes: 80 * GIB
    },
    {
      index: 1,
      label: 'GPU 1',
      kind: 'gpu',
      utilization_pct: 87,
      memory_used_bytes: 20 * GIB,
      memory_total_bytes: 80 * GIB,
      mine: true
    }
  ],
  kernels: [
    {
      kernel_id: 'busy',
      path: 'a.ipynb',
      memory_bytes: 12.3 * GIB,
      memory_known: true,
      devices: ['GPU 1 (CUDA 1)'],
      idle: {
        state: 'busy',
        signal: 'per-process',
        held_bytes: 12.3 * GIB,
        gpus: ['GPU 1'],
        idle_s: null,
        episode: 'e1',
        text: 'works on GPU 1'
      }
    },
    {
      kernel_id: 'idle',
      path: 'b.ipynb',
      memory_bytes: 4 * GIB,
      memory_known: true,
      devices: ['GPU 0'],
      idle: {
        state: 'idle',
        signal: 'per-process',
        held_bytes: 4 * GIB,
        gpus: ['GPU 0'],
        idle_s: 42 * 60,
        episode: 'e2',
        text: 'no GPU work for 42 min'
      }
    }
  ]
};

describe('kernelGpuWords', () => {
  it('says the kernel’s GPU, memory and utilization, or how long it is idle, or nothing', () => {
    const glance = parseGlance(GLANCE);
    // An older server, or a shared GPU: the GPU's utilization, named as the GPU's.
    expect(kernelGpuWords(glance, 'busy', THRESHOLDS)?.text).toBe(
      'GPU 1 · 12.3 GiB · GPU 87%'
    );
    expect(kernelGpuWords(glance, 'busy', THRESHOLDS)?.tooltip).toContain(
      'the whole GPU’s'
    );
    expect(kernelGpuWords(glance, 'idle', THRESHOLDS)?.text).toBe(
      'idle on GPU for 42 min'
    );
    expect(kernelGpuWords(glance, 'idle', THRESHOLDS)?.tooltip).toContain(
      'no GPU work for 42 min'
    );
    expect(kernelGpuWords(glance, 'busy', THRESHOLDS)?.tooltip).toContain(
      '12.3 GiB on GPU 1 (CUDA 1)'
    );
    expect(kernelGpuWords(glance, 'cpu-only', THRESHOLDS)).toBeNull();
    expect(kernelGpuWords(glance, null, THRESHOLDS)).toBeNull();
    expect(kernelGpuWords(null, 'busy', THRESHOLDS)).toBeNull();
  });
});

describe('the kernel’s own share (issue 53)', () => {
  it('shows the kernel’s own share where the server tells it, not the GPU’s', () => {
    const glance = parseGlance({
      ...GLANCE,
      kernels: [
        {
          ...GLANCE.kernels[0],
          own_pct: 0,
          own_signal: 'per-process SM samples'
        }
      ]
    });
    const words = kernelGpuWords(glance, 'busy', THRESHOLDS);
    expect(words?.text).toBe('GPU 1 · 12.3 GiB · kernel 0%');
    expect(words?.tooltip).toContain('Its own GPU activity: 0% (per-process');
  });

  it('is focusable, named by its figures, and not a live region', () => {
    const model = new GlanceModel({
      fetch: () => Promise.resolve(GLANCE),
      autoStart: false
    });
    const item = new KernelGpuItem({ model, kernelId: () => 'busy' });
    expect(item.node.getAttribute('role')).not.toBe('status');
    expect(item.node.getAttribute('aria-live')).toBeNull();
    expect(item.node.tabIndex).toBe(0);
    item.dispose();
    model.dispose();
  });
});

describe('KernelGpuItem', () => {
  it('shows the shared poll’s reading, and asks for it only while its notebook is shown and it is wanted', async () => {
    let calls = 0;
    const model = new GlanceModel({
      fetch: () => (calls++, Promise.resolve(GLANCE)),
      autoStart: false
    });
    let kernelId: string | null = 'busy';
    const item = new KernelGpuItem({ model, kernelId: () => kernelId });
    const toolbar = new Widget();
    const users = (): number =>
      (model.poller as unknown as { _users: Map<unknown, unknown> })._users
        .size;
    expect(users()).toBe(0);
    Widget.attach(item, document.body);
    expect(users()).toBe(1);
    await model.refresh();
    expect(calls).toBe(1);
    expect(item.node.textContent).toBe('GPU 1 · 12.3 GiB · GPU 87%');
    expect(item.node.getAttribute('aria-label')).toContain(
      'GPU 1 · 12.3 GiB · GPU 87%. This notebook’s kernel holds'
    );
    expect(item.node.hidden).toBe(false);
    // The notebook's kernel changed to one without a GPU: nothing shown.
    kernelId = 'cpu-only';
    item.refresh();
    expect(item.node.hidden).toBe(true);
    // Hidden (a background tab), it reads nothing; shown, again.
    item.hide();
    expect(users()).toBe(0);
    item.show();
    MessageLoop.flush();
    expect(users()).toBe(1);
    item.enabled = false;
    expect(users()).toBe(0);
    expect(item.node.hidden).toBe(true);
    item.dispose();
    toolbar.dispose();
    model.dispose();
  });
});

describe("the open command's time range", () => {
  it('is validated, carried into the URL, and applied to a tab already open', () => {
    expect(
      toOpenArgs({
        route: '/GPU-Activity',
        label: 'GPU Activity',
        range: { start_s: 10.5, end_s: 52, label: 'cell [3]' }
      })
    ).toEqual({
      route: '/GPU-Activity',
      label: 'GPU Activity',
      range: { start_s: 10.5, end_s: 52, label: 'cell [3]' }
    });
    for (const bad of [
      { start_s: 5, end_s: 1 },
      { start_s: 'x', end_s: 1 },
      { start_s: NaN, end_s: 1 }
    ]) {
      expect(toOpenArgs({ route: '/GPU-Activity', range: bad })?.range).toBe(
        undefined
      );
    }
    expect(
      dashboardUrl('/lab/', '/GPU-Activity', 'dark', {
        start_s: 10.5,
        end_s: 52,
        label: 'cell [3]'
      })
    ).toBe(
      '/lab/nvdashboard/GPU-Activity?theme=dark&start=10.5&end=52&label=cell%20%5B3%5D'
    );
    // A cell's GPUs, by UUID: validated as strings, carried into the URL.
    expect(
      toOpenArgs({
        route: '/GPU-Activity',
        range: {
          start_s: 1,
          end_s: 2,
          label: '',
          gpus: ['GPU-a', 7, '', 'MIG-b']
        }
      })?.range
    ).toEqual({ start_s: 1, end_s: 2, label: '', gpus: ['GPU-a', 'MIG-b'] });
    expect(
      toOpenArgs({
        route: '/GPU-Activity',
        range: { start_s: 1, end_s: 2, label: '', gpus: 'GPU-a' }
      })?.range
    ).toEqual({ start_s: 1, end_s: 2, label: '' });
    expect(
      dashboardUrl('/lab/', '/GPU-Activity', 'light', {
        start_s: 1,
        end_s: 2,
        label: 'cell [3]',
        gpus: ['GPU-a', 'MIG-b']
      })
    ).toBe(
      '/lab/nvdashboard/GPU-Activity?theme=light&start=1&end=2&label=cell%20%5B3%5D&gpus=GPU-a%2CMIG-b'
    );
    expect(
      cellReportUrl(
        '/lab/',
        'k 1',
        '2026-12-05T12:03:04.1+00:00',
        '1764936041.3'
      )
    ).toBe(
      '/lab/nvdashboard/cell.json?kernel=k%201&start=2026-12-05T12%3A03%3A04.1%2B00%3A00&end=1764936041.3'
    );
    const updated: unknown[] = [];
    const tab = new Widget();
    tab.id = 'nvdashboard-GPU-Activity';
    const result = openOrActivate(
      {
        route: '/GPU-Activity',
        label: 'GPU Activity',
        range: { start_s: 1, end_s: 2, label: '' }
      },
      {
        find: () => tab,
        create: () => new Widget(),
        attach: () => undefined,
        activate: () => undefined,
        update: (widget, args) => updated.push([widget.id, args.range])
      }
    );
    expect(result.created).toBe(false);
    expect(updated).toEqual([
      ['nvdashboard-GPU-Activity', { start_s: 1, end_s: 2, label: '' }]
    ]);
  });
});
