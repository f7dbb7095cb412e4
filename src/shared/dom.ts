/**
 * The two DOM helpers every view uses: `element` builds a node, and
 * `RenderOnShow` is the base of every sidebar section, so that nothing is
 * drawn while it is off screen and what is shown catches up when shown.
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

/** A new element with a class, optional text and attributes. */
export function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string,
  attributes: Record<string, string> = {}
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, value);
  }
  return node;
}

/** Set a node's text only when it differs, so an unchanged line is left alone. */
export function setText(node: Node, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

/** Set (or with null, remove) an attribute only when it differs. */
export function setAttr(
  node: Element,
  name: string,
  value: string | null
): void {
  if (value === null) {
    if (node.hasAttribute(name)) {
      node.removeAttribute(name);
    }
  } else if (node.getAttribute(name) !== value) {
    node.setAttribute(name, value);
  }
}

/**
 * Show or hide a node only when that changes: setting `hidden` to what it is
 * writes the attribute again, and every observer of the page sees it.
 */
export function setHidden(node: HTMLElement, hidden: boolean): void {
  if (node.hidden !== hidden) {
    node.hidden = hidden;
  }
}

/** Add or remove a class only when that changes (`classList` writes either way). */
export function setClass(node: Element, name: string, on: boolean): void {
  if (node.classList.contains(name) !== on) {
    node.classList.toggle(name, on);
  }
}

/**
 * A widget that draws only while it is visible. `invalidate()` marks the
 * view out of date and, when on screen, asks Lumino for an update: however
 * many changes come before the next animation frame, it is drawn once then.
 * Off screen, it is drawn when next attached or shown.
 */
export abstract class RenderOnShow extends Widget {
  /** How many times the view was drawn (tests and debugging). */
  get renderCount(): number {
    return this._renderCount;
  }

  /** Whether a change is waiting for the widget to be shown. */
  get isOutOfDate(): boolean {
    return this._outOfDate;
  }

  /** What is shown changed: draw at the next frame if visible, else when shown. */
  invalidate(): void {
    if (this.isDisposed) {
      return;
    }
    this._outOfDate = true;
    if (this.isVisible) {
      this.update(); // Lumino merges the requests made before it runs
    }
  }

  protected abstract render(): void;

  protected onUpdateRequest(msg: Message): void {
    super.onUpdateRequest(msg);
    this._catchUp();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._catchUp();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._catchUp();
  }

  private _catchUp(): void {
    if (this._outOfDate && this.isVisible) {
      this._draw();
    }
  }

  private _draw(): void {
    this._outOfDate = false;
    this._renderCount++;
    this.render();
  }

  private _outOfDate = true;
  private _renderCount = 0;
}

/**
 * Make `parent`'s children exactly `wanted`, in order, moving only the nodes
 * that are out of place (a moved node loses focus; one left alone keeps it).
 */
export function placeInOrder(parent: HTMLElement, wanted: HTMLElement[]): void {
  const keep = new Set<Element>(wanted);
  for (const child of Array.from(parent.children)) {
    if (!keep.has(child)) {
      child.remove();
    }
  }
  wanted.forEach((node, i) => {
    const current = parent.children[i];
    if (current !== node) {
      parent.insertBefore(node, current ?? null);
    }
  });
}
