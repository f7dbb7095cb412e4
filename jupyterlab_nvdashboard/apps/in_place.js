// HTML set in place (see apps/in_place.py). Pasted in front of the scripts that use it.

// Make `target`'s children show `html`, touching only the text, attributes and elements
// that differ from what is shown. An element with a data-key (a table row for one GPU, one
// process) is matched by its key, not its position: a row inserted at the top is one
// insertion, not a rewrite of every row below it.
function morphInto(target, html) {
  const fresh = document.createElement("template");
  fresh.innerHTML = html;
  morphChildren(target, fresh.content);
}

function keyOf(node) {
  return node.nodeType === Node.ELEMENT_NODE ? node.getAttribute("data-key") : null;
}

function morphNode(old, next) {
  if (old.nodeType !== Node.ELEMENT_NODE) {
    if (old.nodeValue !== next.nodeValue) old.nodeValue = next.nodeValue;
    return;
  }
  for (const {name, value} of Array.from(next.attributes)) {
    if (old.getAttribute(name) !== value) old.setAttribute(name, value);
  }
  for (const {name} of Array.from(old.attributes)) {
    // A <details> the reader opened stays open: that attribute is theirs, not the page's.
    if (name === "open" && old.nodeName === "DETAILS") continue;
    if (!next.hasAttribute(name)) old.removeAttribute(name);
  }
  morphChildren(old, next);
}

function morphChildren(into, from) {
  const wanted = Array.from(from.childNodes);
  const keyed = new Map();
  for (const child of Array.from(into.childNodes)) {
    const key = keyOf(child);
    if (key !== null) keyed.set(key, child);
  }
  // Place each wanted node at its position: a kept keyed node (moved only if out of place),
  // the node already there when neither has a key and they are of one kind, else a new one
  // (moved out of the template, used once).
  wanted.forEach((next, i) => {
    const current = into.childNodes[i] || null;
    const key = keyOf(next);
    const kept = key !== null ? keyed.get(key) : undefined;
    if (kept) {
      keyed.delete(key);
      if (kept !== current) into.insertBefore(kept, current);
      morphNode(kept, next);
    } else if (current && key === null && keyOf(current) === null &&
               current.nodeType === next.nodeType && current.nodeName === next.nodeName) {
      morphNode(current, next);
    } else if (current && key === null && keyOf(current) === null) {
      into.replaceChild(next, current);
    } else {
      into.insertBefore(next, current);
    }
  });
  while (into.childNodes.length > wanted.length) into.removeChild(into.lastChild);
}

// The rendered view of a model on this page (BokehJS keeps the root views in Bokeh.index).
// Cached on the page: a CustomJS runs this file again at each call.
const inPlaceViews = window.nvdashboardViews || (window.nvdashboardViews = new WeakMap());

function viewOf(model) {
  const cached = inPlaceViews.get(model);
  if (cached && cached.el.isConnected) return cached;
  const views = [];
  // A plot's elements (the timelines' HTML over the canvas) are among its children_views.
  const visit = (view) => {
    views.push(view);
    const children = typeof view.children_views === "function" ? view.children_views()
      : view.child_views || [];
    for (const child of children) visit(child);
  };
  for (const view of Object.values((window.Bokeh && window.Bokeh.index) || {})) visit(view);
  const view = views.find((candidate) => candidate.model === model);
  if (view) inPlaceViews.set(model, view);
  return view;
}

// A Bokeh Div's HTML, set in place; the model keeps the same text without hearing of it,
// so a later render of the Div shows what is shown now.
function setDivHtml(div, html) {
  if (div.text === html) return;
  const view = viewOf(div);
  if (!view || !view.markup_el || div.render_as_text) {
    div.text = html;
    return;
  }
  div.setv({text: html}, {silent: true});
  morphInto(view.markup_el, html);
}
