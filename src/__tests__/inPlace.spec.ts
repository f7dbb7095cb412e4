/**
 * The dashboard pages' in-place HTML (jupyterlab_nvdashboard/apps/in_place.js),
 * run here in the test DOM: a renewed table changes only what differs, and a
 * keyed row (data-key) is matched by its key, not its position.
 */
import * as fs from 'fs';
import * as path from 'path';

const SCRIPT = fs.readFileSync(
  path.resolve(__dirname, '../../jupyterlab_nvdashboard/apps/in_place.js'),
  'utf8'
);

const morphInto = new Function(`${SCRIPT}\nreturn morphInto;`)() as (
  target: HTMLElement,
  html: string
) => void;

function table(keys: number[]): string {
  const rows = keys.map(
    key =>
      `<tr data-key="gpu-${key}"><td class="gpu">GPU ${key}</td>` +
      `<td class="util"><b>${key}%</b></td><td>${key} GiB</td></tr>`
  );
  return `<table><tbody>${rows.join('')}</tbody></table>`;
}

/** How many DOM changes `change` makes under `node`. */
async function changesMadeBy(
  node: HTMLElement,
  change: () => void
): Promise<number> {
  let count = 0;
  const observer = new MutationObserver(records => {
    for (const record of records) {
      count +=
        record.type === 'childList'
          ? record.addedNodes.length + record.removedNodes.length
          : 1;
    }
  });
  observer.observe(node, {
    subtree: true,
    childList: true,
    attributes: true,
    characterData: true
  });
  change();
  await Promise.resolve();
  observer.disconnect();
  return count;
}

describe('morphInto', () => {
  const thirty = Array.from({ length: 30 }, (_, i) => i + 1);

  it('inserts one row at the top of a keyed table as one change', async () => {
    const box = document.createElement('div');
    morphInto(box, table(thirty));
    const rows = Array.from(box.querySelectorAll('tr'));
    const changes = await changesMadeBy(box, () =>
      morphInto(box, table([0, ...thirty]))
    );
    // By position, each of the 30 rows below would be rewritten (121 changes).
    expect(changes).toBe(1);
    const after = Array.from(box.querySelectorAll('tr'));
    expect(after.slice(1)).toEqual(rows); // the same elements, kept
    expect(after.map(row => row.dataset.key)).toEqual(
      [0, ...thirty].map(key => `gpu-${key}`)
    );
  });

  it('moves and removes keyed rows, and still updates their text in place', async () => {
    const box = document.createElement('div');
    morphInto(box, table([1, 2, 3]));
    const [one, , three] = Array.from(box.querySelectorAll('tr'));
    morphInto(box, table([3, 1]).replace('3%', '99%'));
    const rows = Array.from(box.querySelectorAll('tr'));
    expect(rows).toEqual([three, one]);
    expect(three.textContent).toContain('99%');
  });

  it('matches unkeyed nodes by position, as before', async () => {
    const box = document.createElement('div');
    morphInto(box, '<p>a</p><p>b</p>');
    const [a] = Array.from(box.children);
    const changes = await changesMadeBy(box, () =>
      morphInto(box, '<p>a</p><p>c</p><span>d</span>')
    );
    expect(box.innerHTML).toBe('<p>a</p><p>c</p><span>d</span>');
    expect(box.children[0]).toBe(a);
    expect(changes).toBe(2); // one text, one new element
  });

  it('keeps a <details> the reader opened open', () => {
    const box = document.createElement('div');
    const html = '<details><summary>GPU 0: starved</summary>more</details>';
    morphInto(box, html);
    (box.firstElementChild as HTMLDetailsElement).open = true;
    morphInto(box, html.replace('starved', 'idle'));
    expect((box.firstElementChild as HTMLDetailsElement).open).toBe(true);
    expect(box.textContent).toContain('idle');
  });
});
