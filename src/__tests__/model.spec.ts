import { TranslationBundle } from '@jupyterlab/translation';

import {
  describeStatus,
  IStatusLine,
  parseIndex,
  parseInfo
} from '../dashboards/serverInfo';
import {
  errorMessage,
  FetchError,
  isStartingError,
  NetworkFailure
} from '../shared/errors';
import {
  formatAge,
  formatMemory,
  formatPercent,
  memoryUsage
} from '../shared/format';

function texts(lines: IStatusLine[]): string[] {
  return lines.map(line => line.text);
}

const INFO = {
  version: '2026.12.0',
  nvml_state: 'ok',
  nvml_message: '',
  simulated: false,
  gpu_count: 2,
  devices: [
    { index: 0, name: 'NVIDIA H200', uuid: 'GPU-0' },
    { index: 1, name: 'NVIDIA H200', uuid: 'GPU-1' }
  ],
  interval_s: 0.2,
  history_s: 1800
};

describe('parseIndex', () => {
  it('accepts a route → title object', () => {
    const index = {
      '/GPU-Utilization': 'GPU Utilization',
      '/GPU-Memory': 'GPU Memory'
    };
    expect(parseIndex(index)).toEqual(index);
    expect(parseIndex({})).toEqual({});
  });

  it.each([null, 42, 'text', true, [], [['/a', 'A']], undefined])(
    'rejects the non-object %p',
    value => {
      expect(() => parseIndex(value)).toThrow(/not a JSON object/);
    }
  );

  it.each([1, null, { title: 'x' }, ['x'], false])(
    'rejects the non-string title %p',
    value => {
      expect(() => parseIndex({ '/GPU-Utilization': value })).toThrow(
        /"\/GPU-Utilization" is not a string/
      );
    }
  );

  it('rejects an empty route', () => {
    expect(() => parseIndex({ '/': 'Root' })).toThrow(/empty route/);
  });
});

describe('parseInfo', () => {
  it('keeps the documented fields', () => {
    const info = parseInfo(INFO);
    expect(info.gpu_count).toBe(2);
    expect(info.devices[1]).toMatchObject({ index: 1, name: 'NVIDIA H200' });
    expect(info.interval_s).toBe(0.2);
    expect(parseInfo({ ...INFO, reading_gpus: true }).reading_gpus).toBe(true);
  });

  it('fills neutral defaults for missing optional fields', () => {
    const info = parseInfo({ nvml_state: 'driver_not_loaded' });
    expect(info).toMatchObject({
      simulated: false,
      gpu_count: 0,
      devices: [],
      nvml_message: '',
      reading_gpus: false
    });
  });

  it('rejects non-objects and a missing or non-string state', () => {
    expect(() => parseInfo([])).toThrow(/not a JSON object/);
    expect(() => parseInfo(null)).toThrow(/not a JSON object/);
    expect(() => parseInfo({})).toThrow(/no NVML state/);
    expect(() => parseInfo({ nvml_state: 3 })).toThrow(/no NVML state/);
    expect(() => parseInfo({ nvml_state: null })).toThrow(/no NVML state/);
  });

  it('keeps a state it does not know as unknown, with the server string', () => {
    const info = parseInfo({
      nvml_state: 'sleepy',
      nvml_message: 'The GPUs are napping.'
    });
    expect(info.nvml_state).toBe('unknown');
    expect(info.nvml_state_reported).toBe('sleepy');
    const summary = describeStatus(info);
    expect(summary.kind).toBe('unknown');
    expect(summary.headline).toBe('GPU status unknown');
    expect(texts(summary.details)).toEqual([
      'The server reported a GPU state this page does not know: "sleepy".',
      'The GPUs are napping.'
    ]);
  });

  it('reads the simulated profile', () => {
    expect(parseInfo(INFO).simulated_profile).toBeNull();
    const info = parseInfo({
      ...INFO,
      simulated: true,
      simulated_profile: 'a100-mig'
    });
    expect(info.simulated_profile).toBe('a100-mig');
    expect(texts(describeStatus(info).details)).toContain(
      'Simulated hardware: a100-mig.'
    );
  });
});

/**
 * Every state the server sends (`NvmlState` in the Python package), with the
 * headline, the plain-words first line and a message like the server's.
 */
const STATES: Array<[string, string, string, string, string]> = [
  [
    'uninitialized',
    'pending',
    'Looking for GPUs…',
    'GPU monitoring is still starting.',
    'NVML has not been started yet.'
  ],
  [
    'library_not_found',
    'no-gpu',
    'No GPU',
    'No GPU: the NVIDIA management library (NVML) was not found.',
    'No NVIDIA driver library (libnvidia-ml) was found on this machine.'
  ],
  [
    'driver_not_loaded',
    'no-gpu',
    'No GPU',
    'No GPU: the NVIDIA driver is not loaded.',
    'The NVIDIA driver is not loaded, so no NVIDIA GPU can be read.'
  ],
  [
    'no_permission',
    'no-gpu',
    'No GPU',
    'No GPU: no permission to query the GPUs.',
    'This user has no permission to read the NVIDIA GPUs.'
  ],
  [
    'no_devices',
    'no-gpu',
    'No GPU',
    'No GPU: no GPU is visible to this process.',
    'NVML is running but no NVIDIA GPU is visible to this process: ' +
      'CUDA_VISIBLE_DEVICES is set to "" and hides all 8 GPUs.'
  ],
  [
    'error',
    'no-gpu',
    'No GPU',
    'No GPU: the NVIDIA management library reported an error.',
    'NVML failed to start.'
  ]
];

describe('each NVML state the server sends', () => {
  it.each(STATES)(
    '%s: parsed, and described in plain words with the message',
    (state, kind, headline, words, message) => {
      const info = parseInfo({
        ...INFO,
        nvml_state: state,
        nvml_message: message,
        gpu_count: 0,
        devices: []
      });
      expect(info.nvml_state).toBe(state);
      const summary = describeStatus(info);
      expect(summary.kind).toBe(kind);
      expect(summary.headline).toBe(headline);
      expect(texts(summary.details)).toEqual([words, message]);
    }
  );

  it('ok: parsed, and lists the GPUs', () => {
    const info = parseInfo({ ...INFO, nvml_message: 'NVML is running.' });
    expect(info.nvml_state).toBe('ok');
    const summary = describeStatus(info);
    expect(summary.kind).toBe('gpus');
    expect(summary.headline).toBe('2 GPUs');
    expect(texts(summary.details)).toEqual([
      'GPU 0: NVIDIA H200',
      'GPU 1: NVIDIA H200'
    ]);
  });

  it('no_devices: the CUDA_VISIBLE_DEVICES reason reaches the reader', () => {
    const message =
      'NVML sees 8 GPUs, but CUDA_VISIBLE_DEVICES="" hides them from this process.';
    const summary = describeStatus(
      parseInfo({ nvml_state: 'no_devices', nvml_message: message })
    );
    expect(summary.kind).toBe('no-gpu');
    expect(texts(summary.details)).toContain(message);
    expect(summary.details[0].text).toMatch(
      /no GPU is visible to this process/
    );
  });
});

const PARENT = {
  index: 0,
  label: 'GPU 0',
  kind: 'gpu',
  parent: null,
  nvml_index: 0,
  cuda_index: null,
  name: 'NVIDIA A100-SXM4-80GB',
  uuid: 'GPU-5b8e2a44-0000-0000-0000-000000000000',
  memory_total_bytes: 85899345920,
  mig_enabled: true,
  mig: null,
  virtualization: 'none',
  lost: false,
  unavailable: {
    utilization_pct: 'not reported for the whole GPU while MIG is enabled'
  }
};

function migChild(
  index: number,
  instance: number,
  cuda: number | null,
  profile: string,
  bytes: number,
  slices: [number, number, number, number]
): Record<string, unknown> {
  const [gpu, compute, memory, sms] = slices;
  return {
    index,
    label: `GPU 0 · MIG ${instance}`,
    kind: 'mig',
    parent: 0,
    nvml_index: 0,
    cuda_index: cuda,
    name: `NVIDIA A100-SXM4-80GB MIG ${profile}`,
    uuid: `MIG-${instance}`,
    memory_total_bytes: bytes,
    mig_enabled: false,
    virtualization: 'none',
    lost: false,
    mig: {
      gpu_instance_id: instance,
      compute_instance_id: 0,
      gpu_slices: gpu,
      compute_slices: compute,
      memory_slices: memory,
      multiprocessors: sms
    },
    unavailable: {}
  };
}

const MIG_INFO = {
  ...INFO,
  gpu_count: 3,
  devices: [
    PARENT,
    migChild(1, 1, 0, '3g.40gb', 42949672960, [3, 3, 4, 42]),
    migChild(2, 2, 1, '2g.20gb', 21474836480, [2, 2, 2, 28]),
    {
      index: 3,
      label: 'GPU 1',
      kind: 'gpu',
      parent: null,
      nvml_index: 1,
      cuda_index: 2,
      name: 'NVIDIA A100-SXM4-80GB',
      mig_enabled: false,
      mig: null,
      lost: true,
      unavailable: {}
    }
  ]
};

describe('device identity', () => {
  it('parses the new fields', () => {
    const [parent, child] = parseInfo(MIG_INFO).devices;
    expect(parent).toMatchObject({
      label: 'GPU 0',
      kind: 'gpu',
      parent: null,
      cuda_index: null,
      cuda_index_known: true,
      mig_enabled: true,
      mig: null,
      unavailable: {
        utilization_pct: 'not reported for the whole GPU while MIG is enabled'
      }
    });
    expect(child).toMatchObject({
      label: 'GPU 0 · MIG 1',
      kind: 'mig',
      parent: 0,
      cuda_index: 0,
      memory_total_bytes: 42949672960,
      mig: { gpu_instance_id: 1, gpu_slices: 3, memory_slices: 4 }
    });
  });

  it('lists a MIG parent with its two children under it, and a lost GPU', () => {
    const summary = describeStatus(parseInfo(MIG_INFO));
    expect(summary.kind).toBe('gpus');
    expect(summary.headline).toBe('2 GPUs with 2 MIG devices');
    expect(summary.details).toEqual([
      {
        text: 'GPU 0 (not visible to CUDA, MIG enabled): NVIDIA A100-SXM4-80GB',
        kind: 'device',
        lost: false
      },
      {
        text:
          '↳ GPU 0 · MIG 1 (CUDA 0): 3g.40gb, 40.0 GiB, ' +
          '3 GPU slices (3 compute, 4 memory), 42 SMs',
        kind: 'mig',
        lost: false
      },
      {
        text:
          '↳ GPU 0 · MIG 2 (CUDA 1): 2g.20gb, 20.0 GiB, ' +
          '2 GPU slices (2 compute, 2 memory), 28 SMs',
        kind: 'mig',
        lost: false
      },
      {
        text: 'GPU 1 (CUDA 2): NVIDIA A100-SXM4-80GB (lost: no longer answering)',
        kind: 'device',
        lost: true
      }
    ]);
  });

  it('puts MIG devices under their parent even when listed out of order', () => {
    const [parent, first, second, other] = MIG_INFO.devices;
    const summary = describeStatus(
      parseInfo({ ...MIG_INFO, devices: [second, other, parent, first] })
    );
    // Each line's identity: the text up to the first " (".
    expect(
      summary.details.map(line => [line.kind, line.text.split(' (')[0]])
    ).toEqual([
      ['device', 'GPU 1'],
      ['device', 'GPU 0'],
      ['mig', '↳ GPU 0 · MIG 2'],
      ['mig', '↳ GPU 0 · MIG 1']
    ]);
  });

  it('still shows a MIG device whose parent is not listed', () => {
    const [, first] = MIG_INFO.devices;
    const summary = describeStatus(
      parseInfo({ ...MIG_INFO, devices: [first] })
    );
    expect(summary.headline).toBe('1 MIG device');
    expect(summary.details).toHaveLength(1);
    expect(summary.details[0].text).toMatch(
      /^↳ GPU 0 · MIG 1 \(CUDA 0\): 3g\.40gb/
    );
  });

  it('says when CUDA does not enumerate a GPU', () => {
    const summary = describeStatus(
      parseInfo({
        ...INFO,
        gpu_count: 1,
        devices: [
          {
            index: 0,
            label: 'GPU 3',
            kind: 'gpu',
            parent: null,
            cuda_index: null,
            name: 'NVIDIA H200',
            mig_enabled: false
          }
        ]
      })
    );
    expect(texts(summary.details)).toEqual([
      'GPU 3 (not visible to CUDA): NVIDIA H200'
    ]);
  });

  it('falls back for an older server that sends only index and name', () => {
    const info = parseInfo({
      ...INFO,
      gpu_count: 1,
      devices: [{ index: 2, name: 'Tesla V100-SXM2-16GB', uuid: 'GPU-2' }]
    });
    expect(info.devices[0]).toMatchObject({
      index: 2,
      label: 'GPU 2',
      kind: 'gpu',
      parent: null,
      cuda_index: null,
      cuda_index_known: false,
      mig: null,
      lost: false,
      unavailable: {}
    });
    const summary = describeStatus(info);
    expect(summary.headline).toBe('1 GPU');
    // No claim about CUDA when the server did not say.
    expect(texts(summary.details)).toEqual(['GPU 2: Tesla V100-SXM2-16GB']);
  });

  it('keeps only string reasons in unavailable', () => {
    const [device] = parseInfo({
      ...INFO,
      devices: [{ index: 0, name: 'x', unavailable: { a: 'why', b: 3 } }]
    }).devices;
    expect(device.unavailable).toEqual({ a: 'why' });
  });
});

describe('describeStatus', () => {
  it('lists real GPUs', () => {
    const summary = describeStatus(parseInfo(INFO));
    expect(summary.kind).toBe('gpus');
    expect(summary.headline).toBe('2 GPUs');
    expect(summary.details).toEqual([
      { text: 'GPU 0: NVIDIA H200', kind: 'device', lost: false },
      { text: 'GPU 1: NVIDIA H200', kind: 'device', lost: false }
    ]);
  });

  it('says simulated GPUs with their count', () => {
    const summary = describeStatus(
      parseInfo({ ...INFO, simulated: true, gpu_count: 4, devices: [] })
    );
    expect(summary).toEqual({
      kind: 'simulated',
      headline: 'Simulated GPUs (4)',
      details: []
    });
  });

  it('explains why there is no GPU, with the server message', () => {
    const summary = describeStatus(
      parseInfo({
        nvml_state: 'library_not_found',
        nvml_message: 'libnvidia-ml.so.1 could not be loaded.',
        gpu_count: 0
      })
    );
    expect(summary.kind).toBe('no-gpu');
    expect(summary.headline).toBe('No GPU');
    expect(texts(summary.details)).toEqual([
      'No GPU: the NVIDIA management library (NVML) was not found.',
      'libnvidia-ml.so.1 could not be loaded.'
    ]);
  });

  it('treats ok with zero devices as no GPU', () => {
    const summary = describeStatus(
      parseInfo({ nvml_state: 'ok', gpu_count: 0 })
    );
    expect(summary.kind).toBe('no-gpu');
    expect(summary.details[0].text).toMatch(/no GPU was found/);
  });
});

describe('errors', () => {
  it('classifies backend-starting failures', () => {
    expect(isStartingError(new FetchError(502, 'bad gateway'))).toBe(true);
    expect(isStartingError(new FetchError(599, 'timeout'))).toBe(true);
    expect(isStartingError(new TypeError('Failed to fetch'))).toBe(true);
    expect(isStartingError(new FetchError(404, 'not found'))).toBe(false);
    expect(isStartingError(new FetchError(500, 'could not start'))).toBe(false);
    expect(isStartingError(new Error('bad JSON'))).toBe(false);
    expect(isStartingError('nope')).toBe(false);
  });

  it('formats messages', () => {
    expect(errorMessage(new Error('boom'))).toBe('boom');
    expect(errorMessage('plain')).toBe('plain');
  });
});

describe('translations', () => {
  it('builds plurals with _n and sentences with __', () => {
    const calls: string[] = [];
    const bundle = {
      __: (msgid: string, ...args: unknown[]) => {
        calls.push(msgid);
        return `T(${args.reduce<string>((s, a, i) => s.replace(`%${i + 1}`, String(a)), msgid)})`;
      },
      _n: (one: string, many: string, n: number) => {
        calls.push(`${one}|${many}`);
        return `N(${(n === 1 ? one : many).replace('%1', String(n))})`;
      }
    } as unknown as TranslationBundle;
    const summary = describeStatus(
      parseInfo({
        nvml_state: 'ok',
        gpu_count: 2,
        devices: [{ index: 0 }, { index: 1 }]
      }),
      bundle
    );
    expect(summary.headline).toBe('N(2 GPUs)');
    expect(calls).toContain('%1 GPU|%1 GPUs');
    const none = describeStatus(
      parseInfo({ nvml_state: 'driver_not_loaded' }),
      bundle
    );
    expect(none.headline).toBe('T(No GPU)');
    expect(none.details[0].text).toBe(
      'T(No GPU: T(the NVIDIA driver is not loaded).)'
    );
  });
});

describe('sentences, never fragments', () => {
  it('puts every status line together with one translated pattern', () => {
    // Each translation is marked: a line glued from pieces would show text
    // outside the outermost mark.
    const bundle = {
      __: (msgid: string, ...args: unknown[]) =>
        `T(${args.reduce<string>((s, a, i) => s.replace(`%${i + 1}`, String(a)), msgid)})`,
      _n: (one: string, many: string, n: number) =>
        `N(${(n === 1 ? one : many).replace('%1', String(n))})`
    } as unknown as TranslationBundle;
    const info = parseInfo({
      nvml_state: 'ok',
      simulated: true,
      simulated_profile: 'a100-mig',
      devices: [
        {
          index: 0,
          kind: 'gpu',
          name: 'A100',
          cuda_index: 0,
          mig_enabled: true,
          lost: true
        },
        {
          index: 1,
          kind: 'mig',
          parent: 0,
          name: 'A100 MIG 3g.40gb',
          memory_total_bytes: 40 * 2 ** 30,
          cuda_index: 1,
          mig: {
            gpu_slices: 3,
            compute_slices: 3,
            memory_slices: 4,
            multiprocessors: 42
          },
          lost: true
        }
      ]
    });
    const summary = describeStatus(info, bundle);
    const lines = [summary.headline, ...summary.details.map(d => d.text)];
    for (const line of lines) {
      expect(line).toMatch(/^[TN]\(.*\)$/);
    }
    expect(summary.headline).toBe(
      'T(T(Simulated GPUs (1)) with N(1 MIG device))'
    );
    for (const state of ['uninitialized', 'driver_not_loaded']) {
      const other = describeStatus(parseInfo({ nvml_state: state }), bundle);
      for (const line of [other.headline, ...other.details.map(d => d.text)]) {
        expect(line).toMatch(/^[TN]\(.*\)$/);
      }
    }
  });
});

describe('formatMemory, memoryUsage, formatPercent and formatAge', () => {
  it('counts memory as nvidia-smi and the dashboards do: GiB, MiB below 1 GiB', () => {
    const GIB = 2 ** 30;
    expect(formatMemory(80 * GIB)).toBe('80.0 GiB');
    expect(formatMemory(85_899_345_920)).toBe('80.0 GiB'); // "86 GB" in SI units
    expect(formatMemory(2.5 * GIB)).toBe('2.5 GiB');
    expect(formatMemory(512 * 2 ** 20)).toBe('512 MiB');
    expect(formatMemory(null)).toBe('n/a');
    expect(memoryUsage(20 * GIB, 80 * GIB)).toBe('20.0 GiB of 80.0 GiB');
    expect(memoryUsage(20 * GIB, null)).toBe('20.0 GiB');
    expect(formatPercent(79.6)).toBe('80%');
    expect(formatPercent(null)).toBe('n/a');
  });

  it('says how old a reading is', () => {
    expect(formatAge(7400)).toBe('7 s');
    expect(formatAge(5 * 60_000)).toBe('5 min');
    expect(formatAge(3 * 3_600_000)).toBe('3 h');
  });
});

describe('isStartingError and parseIndex edges', () => {
  it('does not read a bug (any TypeError) as "server starting"', () => {
    expect(
      isStartingError(
        new TypeError("Cannot read properties of undefined (reading 'x')")
      )
    ).toBe(false);
    expect(isStartingError(new NetworkFailure('offline'))).toBe(true);
  });

  it('rejects routes that the URL builder rejects', () => {
    expect(() => parseIndex({ '/../etc': 'Up' })).toThrow(/invalid route/);
    expect(() => parseIndex({ '/a//b': 'Gap' })).toThrow(/invalid route/);
  });
});
