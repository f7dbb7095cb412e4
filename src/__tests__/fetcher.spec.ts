import { ServerConnection } from '@jupyterlab/services';

import { createServerFetcher, fetchGlance } from '../shared/fetcher';
import { FetchError, isStartingError } from '../shared/errors';

class FakeHeaders extends Map<string, string> {
  append(name: string, value: string): void {
    this.set(name, value);
  }
}

class FakeRequest {
  constructor(
    readonly url: string,
    readonly init: Record<string, unknown> = {}
  ) {}

  headers = new FakeHeaders();
}

function settingsAnswering(status: number, body: unknown, urls: string[]) {
  return ServerConnection.makeSettings({
    baseUrl: 'http://localhost/user/alice/',
    Request: FakeRequest as unknown as typeof Request,
    fetch: ((request: FakeRequest) => {
      urls.push(request.url.split('?')[0]); // no-store adds a cache buster
      return Promise.resolve({
        ok: status < 400,
        status,
        statusText: status < 400 ? 'OK' : 'Bad Gateway',
        json: () => Promise.resolve(body)
      });
    }) as unknown as typeof fetch
  });
}

describe('the server fetcher', () => {
  it('asks the proxy under the base URL and returns the JSON', async () => {
    const urls: string[] = [];
    const settings = settingsAnswering(
      200,
      { '/GPU-Memory': 'GPU Memory' },
      urls
    );
    const fetcher = createServerFetcher(settings);
    expect(await fetcher.fetchIndex()).toEqual({ '/GPU-Memory': 'GPU Memory' });
    await fetcher.fetchInfo();
    await fetchGlance(settings);
    expect(urls).toEqual([
      'http://localhost/user/alice/nvdashboard/index.json',
      'http://localhost/user/alice/nvdashboard/info.json',
      'http://localhost/user/alice/nvdashboard/glance.json'
    ]);
  });

  it('rejects with the HTTP status on a non-2xx answer', async () => {
    const settings = settingsAnswering(502, null, []);
    const error = await fetchGlance(settings).catch(e => e);
    expect(error).toBeInstanceOf(FetchError);
    expect((error as FetchError).status).toBe(502);
    expect((error as FetchError).message).toContain('answered 502 Bad Gateway');
  });

  it('gives up on a request that gets no answer, as a gateway timeout', async () => {
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost/user/alice/',
      Request: FakeRequest as unknown as typeof Request,
      fetch: ((request: FakeRequest) =>
        new Promise((_, reject) => {
          const signal = request.init.signal as AbortSignal;
          signal.addEventListener('abort', () => reject(new Error('aborted')));
        })) as unknown as typeof fetch
    });
    const error = await fetchGlance(settings, 20).catch(e => e);
    expect(error).toBeInstanceOf(FetchError);
    expect((error as FetchError).status).toBe(599);
    expect(isStartingError(error)).toBe(true);
  });

  it('reads a dropped connection as "not answering", not as a bug', async () => {
    // ServerConnection wraps it in a NetworkError, whose name is TypeError.
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost/user/alice/',
      Request: FakeRequest as unknown as typeof Request,
      fetch: (() =>
        Promise.reject(
          new TypeError('The network connection was lost.')
        )) as unknown as typeof fetch
    });
    const error = await fetchGlance(settings).catch(e => e);
    expect(isStartingError(error)).toBe(true);
    expect((error as Error).message).toBe('The network connection was lost.');
  });
});
