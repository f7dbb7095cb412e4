import {
  describeStatus,
  errorMessage,
  FetchError,
  isStartingError,
  parseIndex,
  parseInfo
} from '../model';

const INFO = {
  version: '0.1.0',
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
    const index = { '/GPU-Utilization': 'GPU Utilization', '/GPU-Memory': 'GPU Memory' };
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
  });

  it('fills neutral defaults for missing optional fields', () => {
    const info = parseInfo({ nvml_state: 'driver_not_loaded' });
    expect(info).toMatchObject({
      simulated: false,
      gpu_count: 0,
      devices: [],
      nvml_message: ''
    });
  });

  it('rejects non-objects and unknown states', () => {
    expect(() => parseInfo([])).toThrow(/not a JSON object/);
    expect(() => parseInfo({ nvml_state: 'sleepy' })).toThrow(/Unknown NVML state/);
    expect(() => parseInfo({})).toThrow(/Unknown NVML state/);
  });
});

describe('describeStatus', () => {
  it('lists real GPUs', () => {
    const summary = describeStatus(parseInfo(INFO));
    expect(summary.kind).toBe('gpus');
    expect(summary.headline).toBe('2 GPUs');
    expect(summary.details).toEqual(['GPU 0: NVIDIA H200', 'GPU 1: NVIDIA H200']);
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
    expect(summary.details).toEqual([
      'No GPU: the NVIDIA management library (NVML) was not found.',
      'libnvidia-ml.so.1 could not be loaded.'
    ]);
  });

  it('treats ok with zero devices as no GPU', () => {
    const summary = describeStatus(parseInfo({ nvml_state: 'ok', gpu_count: 0 }));
    expect(summary.kind).toBe('no-gpu');
    expect(summary.details[0]).toMatch(/no GPU was found/);
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
