import {
  GlanceModel,
  GlancePanel,
  GlanceStatusItem,
  DIAGNOSIS_CLASS,
  KERNEL_ROW_CLASS,
  parseGlance,
  statusText,
  statusTooltip
} from '../glance';
import { waitFor } from './fakes';

const GLANCE = {
  devices: [
    {
      index: 0,
      label: 'GPU 0',
      kind: 'gpu',
      utilization_pct: 40,
      memory_used_bytes: 20e9,
      memory_total_bytes: 80e9
    },
    {
      index: 1,
      label: 'GPU 1',
      kind: 'gpu',
      utilization_pct: 80,
      memory_used_bytes: null,
      memory_total_bytes: 80e9
    }
  ],
  kernels: [
    {
      kernel_id: 'k1',
      path: 'work/a.ipynb',
      memory_bytes: 3e9,
      memory_known: true,
      devices: ['GPU 0']
    }
  ]
};

function model(answers: unknown[]): GlanceModel & { calls: number } {
  let calls = 0;
  const m = new GlanceModel({
    fetch: () => Promise.resolve(answers[Math.min(calls++, answers.length - 1)]),
    autoStart: false
  }) as GlanceModel & { calls: number };
  Object.defineProperty(m, 'calls', { get: () => calls });
  return m;
}

describe('parseGlance', () => {
  it('keeps well-formed devices and kernels and drops the rest', () => {
    const parsed = parseGlance({
      devices: [GLANCE.devices[0], { label: 3 }, null],
      kernels: [GLANCE.kernels[0], { path: 'x' }]
    });
    expect(parsed.devices.map(d => d.label)).toEqual(['GPU 0']);
    expect(parsed.kernels.map(k => k.kernel_id)).toEqual(['k1']);
    expect(parseGlance('junk')).toEqual({ devices: [], kernels: [], diagnoses: [] });
  });

  it('turns non-numbers into not available', () => {
    const parsed = parseGlance({
      devices: [{ index: 0, label: 'GPU 0', utilization_pct: 'NaN' }]
    });
    expect(parsed.devices[0].utilization_pct).toBeNull();
  });
});

describe('statusText', () => {
  it('shows mean utilization and the memory it knows, in a few characters', () => {
    expect(statusText(parseGlance(GLANCE))).toBe('GPU 60% · 20/80 GB');
    expect(statusText(null)).toBe('GPU –');
  });

  it('says n/a rather than 0 when nothing is reported', () => {
    const glance = parseGlance({
      devices: [{ index: 0, label: 'GPU 0', kind: 'gpu' }]
    });
    expect(statusText(glance)).toBe('GPU n/a · n/a');
  });
});

const WHY = {
  ...GLANCE,
  diagnoses: [
    {
      index: 0,
      label: 'GPU 0',
      cause: 'launch-bound',
      line: 'GPU 0 launch- or latency-bound: utilization 98%, SM activity 12% over 60 samples and 12 GPM readings (GPM counters)',
      advice: 'launch fewer, bigger kernels: CUDA Graphs'
    },
    { index: 'x', line: 3 }
  ]
};

describe('diagnoses of the GPUs holding your kernels', () => {
  it('keeps well-formed diagnoses and puts them in the status tooltip', () => {
    const glance = parseGlance(WHY);
    expect(glance.diagnoses.map(d => d.cause)).toEqual(['launch-bound']);
    const tooltip = statusTooltip(glance);
    expect(tooltip).toContain('The GPUs of your kernels:');
    expect(tooltip).toContain('GPU 0 launch- or latency-bound: utilization 98%');
    expect(tooltip).toContain('Try: launch fewer, bigger kernels: CUDA Graphs.');
    expect(statusTooltip(parseGlance(GLANCE))).not.toContain('your kernels');
  });

  it('shows them in the sidebar under the kernels, and the status item says them', async () => {
    const m = model([WHY]);
    const panel = new GlancePanel({
      model: m,
      confirm: () => Promise.resolve(false),
      shutdownKernel: () => Promise.resolve()
    });
    const item = new GlanceStatusItem(m, () => undefined);
    await m.refresh();
    const lines = panel.node.querySelectorAll(`.${DIAGNOSIS_CLASS} li`);
    expect(lines.length).toBe(1);
    expect((lines[0] as HTMLElement).dataset.cause).toBe('launch-bound');
    expect(lines[0].textContent).toContain('SM activity 12%');
    expect(lines[0].textContent).toContain('Try: launch fewer');
    expect(item.node.title).toContain('launch- or latency-bound');
    m.dispose();
  });
});

describe('GlanceStatusItem', () => {
  it('follows the model and opens the sidebar on click', async () => {
    const m = model([GLANCE]);
    let clicks = 0;
    const item = new GlanceStatusItem(m, () => clicks++);
    expect(item.node.textContent).toBe('GPU –');
    await m.refresh();
    expect(item.node.textContent).toBe('GPU 60% · 20/80 GB');
    item.node.click();
    expect(clicks).toBe(1);
    m.dispose();
  });
});

describe('GlancePanel', () => {
  it('draws one bar pair per device and lists the kernels', async () => {
    const m = model([GLANCE]);
    const panel = new GlancePanel({
      model: m,
      confirm: () => Promise.resolve(false),
      shutdownKernel: () => Promise.resolve()
    });
    await m.refresh();
    const bars = panel.node.querySelectorAll('.nvdashboard-bar');
    expect(bars.length).toBe(4);
    expect((bars[0] as HTMLElement).dataset.value).toBe('40.0');
    expect((bars[1] as HTMLElement).dataset.value).toBe('25.0');
    expect((bars[3] as HTMLElement).dataset.value).toBe(''); // not available
    const rows = panel.node.querySelectorAll(`.${KERNEL_ROW_CLASS}`);
    expect(rows.length).toBe(1);
    expect(rows[0].textContent).toContain('work/a.ipynb');
    expect(rows[0].textContent).toContain('3.0 GB on GPU 0');
    m.dispose();
  });

  it('shuts a kernel down only after confirmation, then refreshes', async () => {
    const after = { ...GLANCE, kernels: [] };
    const m = model([GLANCE, GLANCE, after]);
    const stopped: string[] = [];
    let answer = false;
    const panel = new GlancePanel({
      model: m,
      confirm: () => Promise.resolve(answer),
      shutdownKernel: id => {
        stopped.push(id);
        return Promise.resolve();
      }
    });
    await m.refresh();
    const button = () =>
      panel.node.querySelector('.nvdashboard-kernel-shutdown') as HTMLButtonElement;
    button().click();
    await new Promise(resolve => setTimeout(resolve, 10));
    expect(stopped).toEqual([]); // declined
    await m.refresh();
    answer = true;
    button().click();
    await waitFor(() => stopped.length === 1 && m.calls === 3);
    expect(stopped).toEqual(['k1']);
    await waitFor(
      () => panel.node.querySelectorAll(`.${KERNEL_ROW_CLASS}`).length === 0
    );
    m.dispose();
  });
});

describe('GlanceModel', () => {
  it('pauses while the page is hidden', async () => {
    let hidden = true;
    let calls = 0;
    const m = new GlanceModel({
      fetch: () => {
        calls++;
        return Promise.resolve(GLANCE);
      },
      interval: 5,
      standby: () => hidden
    });
    await new Promise(resolve => setTimeout(resolve, 60));
    expect(calls).toBe(0);
    hidden = false;
    await waitFor(() => calls > 1);
    m.dispose();
  });
});
