/**
 * Translation coverage, checked the way a language pack is made: an
 * extractor reads the sources and collects the message ids of every
 * `trans.__`, `trans._n`, `trans._p` call. A call whose message is not a
 * literal cannot be extracted, so it is never translated; and text the user
 * sees that goes through no call is never translated either.
 *
 * Like JupyterLab's extractor, it knows a bundle by its name: `trans`,
 * `this.trans` or `this._trans`; a call on any other (`options.trans.__`) is
 * not found. The extractor parses with TypeScript's own parser. Text is looked for
 * where the user sees it: an element's text and its `title`, `aria-label`
 * and `aria-valuetext`, a widget title's label and caption, and what a
 * function returns. A literal counts as text when it reads as words (it has
 * a space or a capital, or is `n/a`); ids, classes and codes do not.
 * Errors thrown for a bug (`new Error`, `console`) are for developers.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as ts from 'typescript';

const SRC = path.resolve(__dirname, '..');

/** TranslationBundle's methods and which arguments are messages. */
const CALLS: Record<string, number[]> = {
  __: [0],
  _n: [0, 1],
  _p: [1],
  _np: [1, 2],
  gettext: [0],
  ngettext: [0, 1],
  pgettext: [1],
  npgettext: [1, 2]
};

/** What a translation bundle is called where the extractor finds its calls. */
const BUNDLES = new Set(['trans', 'this.trans', 'this._trans']);

/** Attributes a user reads or hears. */
const SHOWN_ATTRIBUTES = new Set([
  'title',
  'aria-label',
  'aria-valuetext',
  'placeholder',
  'alt'
]);

/** Properties a user reads: an element's or a widget title's. */
const SHOWN_PROPERTIES = new Set([
  'textContent',
  'innerText',
  'title',
  'label',
  'caption',
  'placeholder'
]);

export interface IExtracted {
  messages: string[];
  /** `file:line: code` of calls whose message is not a literal. */
  notExtractable: string[];
  /** `file:line "text"` of words the user sees that no call translates. */
  untranslated: string[];
}

function isLiteral(node: ts.Node): node is ts.StringLiteralLike {
  return ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node);
}

function readsAsWords(text: string): boolean {
  return /[A-Za-z]/.test(text) && (/\s|[A-Z]/.test(text) || text === 'n/a');
}

function translationCall(node: ts.Node): ts.CallExpression | null {
  return ts.isCallExpression(node) &&
    ts.isPropertyAccessExpression(node.expression) &&
    Object.prototype.hasOwnProperty.call(CALLS, node.expression.name.text)
    ? node
    : null;
}

function calleeName(node: ts.CallExpression): string {
  const callee = node.expression;
  if (ts.isIdentifier(callee)) {
    return callee.text;
  }
  if (ts.isPropertyAccessExpression(callee)) {
    return `${callee.expression.getText()}.${callee.name.text}`;
  }
  return '';
}

/** Words in `node` that are not inside a translation call. */
function wordsOutsideCalls(node: ts.Node): string[] {
  if (translationCall(node)) {
    return [];
  }
  if (
    ts.isCallExpression(node) &&
    /^(console\.|JSON\.)/.test(calleeName(node))
  ) {
    return [];
  }
  if (isLiteral(node)) {
    return readsAsWords(node.text) ? [node.text] : [];
  }
  if (ts.isTemplateExpression(node)) {
    const parts = [
      node.head.text,
      ...node.templateSpans.map(s => s.literal.text)
    ];
    const words = parts.filter(readsAsWords);
    for (const span of node.templateSpans) {
      words.push(...wordsOutsideCalls(span.expression));
    }
    return words;
  }
  if (
    ts.isBinaryExpression(node) &&
    [
      ts.SyntaxKind.EqualsEqualsEqualsToken,
      ts.SyntaxKind.ExclamationEqualsEqualsToken
    ].includes(node.operatorToken.kind)
  ) {
    return []; // a comparison yields a boolean, not text
  }
  if (ts.isConditionalExpression(node)) {
    return [
      ...wordsOutsideCalls(node.whenTrue),
      ...wordsOutsideCalls(node.whenFalse)
    ];
  }
  if (
    ts.isBinaryExpression(node) ||
    ts.isParenthesizedExpression(node) ||
    ts.isArrayLiteralExpression(node) ||
    ts.isCallExpression(node) // `[...].join(' ')`, `x.concat('…')`
  ) {
    const found: string[] = [];
    node.forEachChild(child => {
      if (!ts.isTypeNode(child)) {
        found.push(...wordsOutsideCalls(child));
      }
    });
    return found;
  }
  return [];
}

/** Run the extractor over `files` (paths under src/). */
export function extract(files: string[]): IExtracted {
  const result: IExtracted = {
    messages: [],
    notExtractable: [],
    untranslated: []
  };
  for (const file of files) {
    const text = fs.readFileSync(file, 'utf8');
    const source = ts.createSourceFile(
      file,
      text,
      ts.ScriptTarget.Latest,
      true
    );
    const where = (node: ts.Node): string =>
      `${path.relative(SRC, file)}:${
        source.getLineAndCharacterOfPosition(node.getStart()).line + 1
      }`;
    const shown = (node: ts.Node | undefined): void => {
      if (!node) {
        return;
      }
      for (const words of wordsOutsideCalls(node)) {
        result.untranslated.push(`${where(node)} ${JSON.stringify(words)}`);
      }
    };
    const visit = (node: ts.Node): void => {
      const call = translationCall(node);
      if (call) {
        const name = (call.expression as ts.PropertyAccessExpression).name.text;
        const bundle = (call.expression as ts.PropertyAccessExpression)
          .expression;
        for (const position of CALLS[name]) {
          const arg = call.arguments[position];
          if (arg && isLiteral(arg) && BUNDLES.has(bundle.getText())) {
            result.messages.push(arg.text);
          } else {
            result.notExtractable.push(`${where(call)}: ${call.getText()}`);
          }
        }
      }
      if (ts.isCallExpression(node)) {
        const name = calleeName(node);
        const args = node.arguments;
        if (name === 'element') {
          shown(args[2]);
          const attributes = args[3];
          if (attributes && ts.isObjectLiteralExpression(attributes)) {
            for (const property of attributes.properties) {
              if (
                ts.isPropertyAssignment(property) &&
                SHOWN_ATTRIBUTES.has(
                  property.name.getText().replace(/^['"]|['"]$/g, '')
                )
              ) {
                shown(property.initializer);
              }
            }
          }
        } else if (name === 'setText') {
          shown(args[1]);
        } else if (
          (name === 'setAttr' || name.endsWith('.setAttribute')) &&
          args[name === 'setAttr' ? 1 : 0] &&
          isLiteral(args[name === 'setAttr' ? 1 : 0]) &&
          SHOWN_ATTRIBUTES.has(
            (args[name === 'setAttr' ? 1 : 0] as ts.StringLiteralLike).text
          )
        ) {
          shown(args[name === 'setAttr' ? 2 : 1]);
        }
      }
      if (
        ts.isBinaryExpression(node) &&
        node.operatorToken.kind === ts.SyntaxKind.EqualsToken &&
        ts.isPropertyAccessExpression(node.left) &&
        SHOWN_PROPERTIES.has(node.left.name.text)
      ) {
        shown(node.right);
      }
      if (ts.isReturnStatement(node) || ts.isArrowFunction(node)) {
        shown(ts.isReturnStatement(node) ? node.expression : undefined);
      }
      if (
        ts.isNewExpression(node) &&
        ts.isIdentifier(node.expression) &&
        /Error$/.test(node.expression.text)
      ) {
        return; // a developer's message (the views wrap it in a sentence)
      }
      node.forEachChild(visit);
    };
    visit(source);
  }
  return result;
}

/** Every source file under src/, in its feature folders; not the tests. */
function sources(): string[] {
  return fs
    .readdirSync(SRC, { recursive: true, encoding: 'utf8' })
    .filter(
      name =>
        name.endsWith('.ts') &&
        !name.endsWith('.d.ts') &&
        !name.split(path.sep).includes('__tests__')
    )
    .map(name => path.join(SRC, name));
}

describe('translation coverage, as the extractor sees it', () => {
  const found = extract(sources());

  it('finds the messages', () => {
    expect(found.messages).toContain('GPU Dashboards');
    expect(found.messages).toContain('Your GPU kernels');
    expect(found.messages.length).toBeGreaterThan(80);
  });

  it('can extract every message: no call with a computed message', () => {
    expect(found.notExtractable).toEqual([]);
  });

  it('leaves no text the user sees untranslated', () => {
    expect(found.untranslated).toEqual([]);
  });

  it('catches what it is meant to catch', () => {
    const probe = path.join(
      fs.mkdtempSync(path.join(os.tmpdir(), 'nvd-')),
      'probe.ts'
    );
    fs.writeFileSync(
      probe,
      [
        "const TITLE = 'GPU Dashboards';",
        'trans.__(TITLE);',
        "options.trans.__('Dashboards');",
        'node.title.caption = `GPU dashboard: ${label}`;',
        "setText(node, ok ? trans.__('Fine') : 'Not fine');",
        "function f() { return 'n/a'; }",
        "element('div', 'nvdashboard-x', 'Loading', { title: 'Open it' });",
        "throw new Error('a developer message');"
      ].join('\n')
    );
    const probed = extract([probe]);
    expect(probed.notExtractable).toHaveLength(2);
    expect(
      probed.untranslated.map(line => line.slice(line.indexOf(' ') + 1))
    ).toEqual([
      '"GPU dashboard: "',
      '"Not fine"',
      '"n/a"',
      '"Loading"',
      '"Open it"'
    ]);
    fs.rmSync(path.dirname(probe), { recursive: true });
  });
});
