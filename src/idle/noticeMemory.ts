/**
 * What the idle notice remembers across reloads, in JupyterLab's state
 * database: the episodes shown, the snoozes, the notebooks not to ask about
 * and the culls already told; bounded, and read back with anything
 * malformed dropped.
 */
import { JSONObject } from '@lumino/coreutils';

import { numberOrNull } from '../shared/format';

/**
 * What the notice remembers across reloads (the state database), all of
 * it bounded: kernel id → the episode shown, kernel id → snoozed until
 * (ms), notebook paths not to ask about, culls already told.
 */
export interface INoticeMemory {
  noticed: Record<string, string>;
  snoozed: Record<string, number>;
  dontAsk: string[];
  cullsTold: string[];
}

/** How many entries each part of the memory keeps (the oldest go first). */
export const MEMORY_BOUND = 200;

export function emptyMemory(): INoticeMemory {
  return { noticed: {}, snoozed: {}, dontAsk: [], cullsTold: [] };
}

/** The last MEMORY_BOUND entries whose values pass `ok`, in their order. */
export function lastEntries<T>(
  record: Record<string, unknown>,
  ok: (v: unknown) => v is T = (v: unknown): v is T => true
): Record<string, T> {
  const kept: Record<string, T> = {};
  for (const [key, value] of Object.entries(record)
    .filter(entry => ok(entry[1]))
    .slice(-MEMORY_BOUND)) {
    kept[key] = value as T;
  }
  return kept;
}

function pairs<T>(
  value: unknown,
  ok: (v: unknown) => v is T
): Record<string, T> {
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    return {};
  }
  return lastEntries(value as Record<string, unknown>, ok);
}

export function texts(value: unknown): string[] {
  return Array.isArray(value)
    ? value.filter(isString).slice(-MEMORY_BOUND)
    : [];
}

export function isString(value: unknown): value is string {
  return typeof value === 'string';
}

function isNumber(value: unknown): value is number {
  return numberOrNull(value) !== null;
}

/** The memory from the state database; anything malformed is dropped. */
export function parseMemory(value: unknown): INoticeMemory {
  const m = (value ?? {}) as Record<string, unknown>;
  return {
    noticed: pairs(m.noticed, isString),
    snoozed: pairs(m.snoozed, isNumber),
    dontAsk: texts(m.dontAsk),
    cullsTold: texts(m.cullsTold)
  };
}

/** The parts of JupyterLab's state database the notice uses. */
export interface INoticeStore {
  fetch(id: string): Promise<unknown>;
  save(id: string, value: JSONObject): Promise<unknown>;
}

/** Where the notice keeps its memory in the state database. */
export const NOTICE_STATE_ID = 'jupyterlab-nvdashboard:idle-notice';
