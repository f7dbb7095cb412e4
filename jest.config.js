/**
 * Jest configuration: JupyterLab's shared test preset (jsdom-like environment,
 * ts-jest for TypeScript, babel for the ES-module packages JupyterLab ships),
 * with our test location and a plain console reporter.
 *
 * Run with `jlpm test`.
 */
const jestJupyterLab = require('@jupyterlab/testutils/lib/jest-config');

const esModules = [
  '@codemirror',
  '@marijn',
  '@microsoft',
  '@jupyter/',
  '@jupyterlab/',
  '@lumino/',
  'color',
  'exenv-es6',
  'lib0',
  'marked',
  'nanoid',
  'vscode-ws-jsonrpc',
  'y-protocols',
  'y-websocket',
  'yjs'
].join('|');

const baseConfig = jestJupyterLab(__dirname);

module.exports = {
  ...baseConfig,
  automock: false,
  // Beside the project's own node_modules, not in the temp folder (jest's default), which
  // the Python suite gives every session afresh: warm, jest takes a third of the CPU.
  cacheDirectory: '<rootDir>/node_modules/.cache/jest',
  collectCoverageFrom: ['src/**/*.{ts,tsx}', '!src/**/*.d.ts'],
  coverageReporters: ['lcov', 'text'],
  reporters: ['default'],
  // The built labextension has a package.json of the same name: not a module to map.
  modulePathIgnorePatterns: ['<rootDir>/jupyterlab_nvdashboard/labextension'],
  testRegex: 'src/__tests__/.*\\.spec\\.tsx?$',
  transformIgnorePatterns: [`/node_modules/(?!${esModules}).*`]
};
