import {
  dashboardTheme,
  dashboardUrl,
  indexUrl,
  infoUrl,
  routePath,
  widgetId
} from '../shared/urls';

describe('urls', () => {
  const cases: Array<[string, string]> = [
    ['/', '/nvdashboard/'],
    ['/user/alice/', '/user/alice/nvdashboard/'],
    ['/user/alice', '/user/alice/nvdashboard/'],
    [
      'http://host:8888/lab-prefix/',
      'http://host:8888/lab-prefix/nvdashboard/'
    ],
    [
      'https://hub.example.org/user/bob%40x/',
      'https://hub.example.org/user/bob%40x/nvdashboard/'
    ]
  ];

  it.each(cases)('builds index.json and info.json under %s', (base, prefix) => {
    expect(indexUrl(base)).toBe(`${prefix}index.json`);
    expect(infoUrl(base)).toBe(`${prefix}info.json`);
  });

  it.each(cases)('builds a themed dashboard URL under %s', (base, prefix) => {
    expect(dashboardUrl(base, '/GPU-Utilization', 'dark')).toBe(
      `${prefix}GPU-Utilization?theme=dark`
    );
    expect(dashboardUrl(base, 'GPU-Memory', 'light')).toBe(
      `${prefix}GPU-Memory?theme=light`
    );
  });

  it('normalises and encodes routes', () => {
    expect(routePath('/GPU-Utilization')).toBe('GPU-Utilization');
    expect(routePath('//Machine-Resources/')).toBe('Machine-Resources');
    expect(routePath('/a b')).toBe('a%20b');
  });

  it('rejects empty and path-climbing routes', () => {
    for (const bad of ['', '/', '//', '/../api', '/x/../../y', '/a//b']) {
      expect(() => routePath(bad)).toThrow(/Invalid dashboard route/);
    }
    expect(() => dashboardUrl('/', '/..', 'dark')).toThrow();
  });

  it('derives stable widget ids', () => {
    expect(widgetId('/GPU-Utilization')).toBe('nvdashboard-GPU-Utilization');
    expect(widgetId('GPU-Utilization')).toBe('nvdashboard-GPU-Utilization');
    expect(widgetId('/a b/c')).toBe('nvdashboard-a_20_b_2f_c');
  });

  it('gives two routes two widget ids', () => {
    const routes = ['/a/b', '/a-b', '/a_b', '/a_2f_b', '/a b', '/é'];
    const ids = routes.map(widgetId);
    expect(new Set(ids).size).toBe(routes.length);
    // Still a valid id for a DOM node and a CSS selector.
    for (const id of ids) {
      expect(id).toMatch(/^[A-Za-z0-9_-]+$/);
    }
  });

  it('picks the theme from the theme manager', () => {
    const manager = (theme: string | null, light: boolean) => ({
      theme,
      isLight: () => light
    });
    expect(dashboardTheme(manager('JupyterLab Dark', false))).toBe('dark');
    expect(dashboardTheme(manager('JupyterLab Light', true))).toBe('light');
    expect(dashboardTheme(manager(null, false))).toBe('light');
    expect(dashboardTheme(null)).toBe('light');
    expect(dashboardTheme(undefined)).toBe('light');
  });
});
