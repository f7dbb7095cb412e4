// HTML set in place (see apps/in_place.py). Pasted in front of the scripts that use it.

// Make `target`'s children show `html`, touching only the text, attributes and elements
// that differ from what is shown.
function morphInto(target, html) {
  const fresh = document.createElement("template");
  fresh.innerHTML = html;
  morphChildren(target, fresh.content);
}

function morphChildren(into, from) {
  const wanted = Array.from(from.childNodes);
  while (into.childNodes.length > wanted.length) into.removeChild(into.lastChild);
  wanted.forEach((next, i) => {
    const old = into.childNodes[i];
    if (!old) into.appendChild(next);  // moved out of the template, used once
    else if (old.nodeType !== next.nodeType || old.nodeName !== next.nodeName) {
      into.replaceChild(next, old);
    } else if (old.nodeType !== Node.ELEMENT_NODE) {
      if (old.nodeValue !== next.nodeValue) old.nodeValue = next.nodeValue;
    } else {
      for (const {name, value} of Array.from(next.attributes)) {
        if (old.getAttribute(name) !== value) old.setAttribute(name, value);
      }
      for (const {name} of Array.from(old.attributes)) {
        if (!next.hasAttribute(name)) old.removeAttribute(name);
      }
      morphChildren(old, next);
    }
  });
}

// The rendered view of a model on this page (BokehJS keeps the root views in Bokeh.index).
// Cached on the page: a CustomJS runs this file again at each call.
const inPlaceViews = window.nvdashboardViews || (window.nvdashboardViews = new WeakMap());

function viewOf(model) {
  const cached = inPlaceViews.get(model);
  if (cached && cached.el.isConnected) return cached;
  const views = [];
  const visit = (view) => { views.push(view); for (const child of view.child_views || []) visit(child); };
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
