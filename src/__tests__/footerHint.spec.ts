/**
 * The hint where a reload dropped cell footers (issue 53, item 9): said once
 * per Lab session, once per drop, never after Dismiss; in the first dropped
 * footer's place; gone when saving is turned on, footers are turned off or
 * its cell runs again; a note with buttons, not a live region.
 */
import { PanelLayout, Widget } from '@lumino/widgets';

import { CellGpuFooter } from '../cells/cellFooter';
import { IFooterCell, NotebookCellFooters } from '../cells/notebookFooters';
import {
  FOOTER_HINT_CLASS,
  FooterHint,
  FooterHints,
  HINT_STATE_ID,
  hintState,
  IHintStore,
  MAX_CELLS,
  MAX_NOTEBOOKS
} from '../cells/footerHint';

/** A state database kept across "reloads" (one `FooterHints` per Lab session). */
function database(): IHintStore & { kept: Map<string, unknown> } {
  const kept = new Map<string, unknown>();
  return {
    kept,
    fetch: async id => kept.get(id),
    save: async (id, value) => {
      // What IStateDB keeps is JSON: nothing shared with the caller.
      kept.set(id, JSON.parse(JSON.stringify(value)));
    }
  };
}

const session = (store: IHintStore) => new FooterHints({ store });

const BUSY = {
  kernel: 'k1',
  notebook: 'a.ipynb',
  start_s: 10,
  end_s: 20,
  judged_from: 'memory',
  touched_gpu: true,
  gpus: [],
  verdict: 'GPU 1: busy 91% of 10 s'
};
const NO_GPU = { ...BUSY, touched_gpu: false, verdict: 'no GPU work' };

function cell(id: string): IFooterCell {
  const widget = new Widget();
  widget.layout = new PanelLayout();
  const metadata = new Map<string, unknown>();
  Object.assign(widget, {
    model: {
      id,
      getMetadata: (key: string) => metadata.get(key),
      setMetadata: (key: string, value: unknown) => metadata.set(key, value),
      deleteMetadata: (key: string) => metadata.delete(key)
    }
  });
  return widget as unknown as IFooterCell;
}

const widgetsOf = (c: IFooterCell): Widget[] => [
  ...(c.layout as PanelLayout).widgets
];

async function settle(ms = 30): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, ms));
  await Promise.resolve();
}

describe('FooterHints', () => {
  it('says once per Lab session, once per drop, in the first dropped footer’s place', async () => {
    const store = database();
    // First session: footers shown under cells b and d of a.ipynb, c of b.ipynb.
    const first = session(store);
    expect(first.opened('a.ipynb')).toBe(true);
    await first.footerShown('a.ipynb', 'd');
    await first.footerShown('a.ipynb', 'b');
    await first.footerShown('a.ipynb', 'b');
    await first.footerShown('b.ipynb', 'c');
    expect(hintState(store.kept.get(HINT_STATE_ID))).toEqual({
      dismissed: false,
      notebooks: { 'a.ipynb': ['d', 'b'], 'b.ipynb': ['c'] }
    });
    // Reload. a.ipynb opened again: the hint under b, its first dropped footer
    // in the notebook's order (not the first run).
    const second = session(store);
    expect(await second.hintFor('a.ipynb', ['a', 'b', 'c', 'd'], true)).toBe(
      'b'
    );
    expect(second.hinted).toBe(true);
    // b.ipynb too dropped its footer: not said again this session, and its
    // drop is told (its record goes).
    expect(await second.hintFor('b.ipynb', ['c'], true)).toBeNull();
    expect(hintState(store.kept.get(HINT_STATE_ID)).notebooks).toEqual({});
    // Another reload: nothing dropped since, nothing said.
    const third = session(store);
    expect(await third.hintFor('a.ipynb', ['a', 'b', 'c', 'd'], true)).toBe(
      null
    );
    // A new drop, a new session: said again (until dismissed).
    await third.footerShown('a.ipynb', 'c');
    const fourth = session(store);
    expect(await fourth.hintFor('a.ipynb', ['a', 'b', 'c', 'd'], true)).toBe(
      'c'
    );
  });

  it('is not said again once dismissed, nor where footers are off or saved', async () => {
    const store = database();
    const first = session(store);
    await first.footerShown('a.ipynb', 'a');
    // Opened with saving on (or footers off): the drop is not told, and the
    // record goes; the session may still say it for another notebook.
    const second = session(store);
    expect(await second.hintFor('a.ipynb', ['a'], false)).toBeNull();
    expect(second.hinted).toBe(false);
    expect(await second.hintFor('a.ipynb', ['a'], true)).toBeNull();
    await second.footerShown('b.ipynb', 'x');
    const third = session(store);
    expect(await third.hintFor('b.ipynb', ['x'], true)).toBe('x');
    await third.dismiss();
    await third.footerShown('b.ipynb', 'x');
    const fourth = session(store);
    expect(await fourth.hintFor('b.ipynb', ['x'], true)).toBeNull();
    expect(hintState(store.kept.get(HINT_STATE_ID)).dismissed).toBe(true);
  });

  it('counts the views of a notebook: a second view drops nothing', () => {
    const hints = session(database());
    expect(hints.opened('a.ipynb')).toBe(true);
    expect(hints.opened('a.ipynb')).toBe(false);
    hints.closed('a.ipynb');
    expect(hints.opened('a.ipynb')).toBe(false);
    hints.closed('a.ipynb');
    hints.closed('a.ipynb');
    expect(hints.opened('a.ipynb')).toBe(true);
  });

  it('keeps a bounded record, and reads an odd or missing one as nothing', async () => {
    const store = database();
    const hints = session(store);
    for (let i = 0; i < MAX_CELLS + 5; i++) {
      await hints.footerShown('a.ipynb', `c${i}`);
    }
    for (let i = 0; i < MAX_NOTEBOOKS + 3; i++) {
      await hints.footerShown(`n${i}.ipynb`, 'x');
    }
    const kept = hintState(store.kept.get(HINT_STATE_ID));
    expect(Object.keys(kept.notebooks)).toHaveLength(MAX_NOTEBOOKS);
    expect(kept.notebooks['n0.ipynb']).toBeUndefined();
    expect(kept.notebooks[`n${MAX_NOTEBOOKS + 2}.ipynb`]).toEqual(['x']);
    expect(hintState({ notebooks: { a: [1, 'b'] }, dismissed: 'yes' })).toEqual(
      { dismissed: false, notebooks: { a: ['b'] } }
    );
    expect(hintState('junk')).toEqual({ dismissed: false, notebooks: {} });
    const broken = new FooterHints({
      store: {
        fetch: () => Promise.reject(new Error('no state database')),
        save: async () => undefined
      }
    });
    expect(await broken.hintFor('a.ipynb', ['a'], true)).toBeNull();
  });
});

describe('FooterHint', () => {
  it('is a note with focusable buttons, not a live region; Dismiss ends it', () => {
    const dismissed: string[] = [];
    const opened: string[] = [];
    const hint = new FooterHint({
      dismiss: () => dismissed.push('yes'),
      openSettings: () => opened.push('settings')
    });
    Widget.attach(hint, document.body);
    expect(hint.hasClass(FOOTER_HINT_CLASS)).toBe(true);
    expect(hint.node.getAttribute('role')).toBe('note');
    expect(
      hint.node.querySelector('[aria-live], [role="status"], [role="alert"]')
    ).toBeNull();
    expect(hint.node.hasAttribute('aria-live')).toBe(false);
    expect(hint.node.textContent).toContain(
      'Save the GPU footers into the notebook file'
    );
    const buttons = Array.from(hint.node.querySelectorAll('button'));
    expect(buttons.map(b => b.textContent)).toEqual([
      'Open Settings',
      'Dismiss'
    ]);
    expect(buttons.every(b => b.type === 'button' && b.tabIndex === 0)).toBe(
      true
    );
    buttons[0].click();
    expect(opened).toEqual(['settings']);
    expect(hint.isDisposed).toBe(false);
    buttons[1].click();
    expect(dismissed).toEqual(['yes']);
    expect(hint.isDisposed).toBe(true);
  });

  it('has no settings button where the settings editor cannot open', () => {
    const hints = new FooterHints({
      store: database(),
      openSettings: () => undefined,
      canOpenSettings: () => false
    });
    const hint = hints.createHint();
    expect(
      Array.from(hint.node.querySelectorAll('button'), b => b.textContent)
    ).toEqual(['Dismiss']);
    hint.dispose();
  });
});

describe('NotebookCellFooters and the hint', () => {
  function controller(
    cells: IFooterCell[],
    answers: Record<string, unknown>,
    save = false
  ) {
    const shown: string[] = [];
    let last = '';
    const footers = new NotebookCellFooters({
      cells: () => cells,
      fetchReport: async () => answers[last],
      open: () => undefined,
      visible: true,
      delayMs: 5,
      save,
      footerShown: id => shown.push(id)
    });
    const run = (cellId: string) => {
      last = cellId;
      footers.cellStarted(cellId);
      footers.cellEnded({
        kernelId: 'k1',
        cellId,
        count: 1,
        start: '2026-12-05T12:00:00Z',
        end: '2026-12-05T12:00:10Z'
      });
    };
    return { footers, shown, run };
  }

  it('tells which footers were shown and not saved', async () => {
    const [a, b] = [cell('a'), cell('b')];
    const { footers, shown, run } = controller([a, b], { a: BUSY, b: NO_GPU });
    run('a');
    await settle();
    run('b'); // no footer under a cell that did no GPU work: nothing dropped
    await settle();
    expect(shown).toEqual(['a']);
    footers.save = true;
    run('a');
    await settle();
    expect(shown).toEqual(['a']);
  });

  it('stands last in the cell, where its footer would, until the cell runs again', async () => {
    const [a, b] = [cell('a'), cell('b')];
    const { footers, run } = controller([a, b], { a: BUSY });
    const hint = new FooterHint({ dismiss: () => undefined });
    footers.showHint('b', hint);
    expect(widgetsOf(b)).toEqual([hint]);
    expect(footers.hint).toBe(hint);
    // Another cell's run leaves it; its own run takes its place.
    run('a');
    await settle();
    expect(hint.isDisposed).toBe(false);
    run('b');
    expect(hint.isDisposed).toBe(true);
    expect(footers.hint).toBeNull();
    expect(widgetsOf(b)).toEqual([]);
  });

  it('goes when saving is turned on or footers off, and where its cell is gone', () => {
    const b = cell('b');
    const { footers } = controller([b], {});
    const saved = new FooterHint({ dismiss: () => undefined });
    footers.showHint('b', saved);
    footers.save = true;
    expect(saved.isDisposed).toBe(true);
    footers.save = false;
    const off = new FooterHint({ dismiss: () => undefined });
    footers.showHint('b', off);
    footers.mode = 'off';
    expect(off.isDisposed).toBe(true);
    const nowhere = new FooterHint({ dismiss: () => undefined });
    footers.showHint('gone', nowhere);
    expect(nowhere.isDisposed).toBe(true);
    expect(widgetsOf(b).some(w => w instanceof CellGpuFooter)).toBe(false);
  });
});
