// A page's data socket (stream/frames.py), open only while the page is shown. Pasted into the
// Bokeh pages' live client (apps/live_client.js) and the plain overview at / (apps/overview.py).
// `live` holds the state tests and the page read: socket, hidden, parentHidden, retryMs,
// connects. `url()` gives the socket's address at each connect; `onFrame(buffer)` gets each
// frame while the page is shown.
function openStream(live, url, onFrame) {
  function connect() {
    if (live.socket || live.hidden) return;
    const socket = new WebSocket(url());
    socket.binaryType = "arraybuffer";
    live.socket = socket;
    live.connects++;
    socket.onmessage = (event) => {
      // A frame hidden after it was shown may get no resize event (a display:none iframe
      // is not laid out again): its size is looked at again at each frame it receives.
      if (window.innerWidth === 0 || window.innerHeight === 0) updateVisibility();
      if (live.socket === socket) onFrame(event.data);
    };
    socket.onclose = (event) => {
      if (live.socket !== socket) return;
      live.socket = null;
      if (event.code === 4000) { window.location.reload(); return; }  // the layout changed
      setTimeout(connect, live.retryMs);
      live.retryMs = Math.min(10000, live.retryMs * 2);
    };
  }

  function disconnect() {
    const socket = live.socket;
    live.socket = null;
    if (socket) socket.close();
  }

  // A hidden page applies nothing: a background browser tab or minimized window
  // (document.hidden), a JupyterLab tab in the background or a collapsed panel (the
  // extension says so by postMessage), or a frame with no size (display:none), seen at a
  // resize or at the next frame received. A frame hidden by its size alone may get no
  // event when it is shown again either: its size is looked at each second until then.
  let sizeCheck = null;
  function updateVisibility() {
    const sizeless = window.innerWidth === 0 || window.innerHeight === 0;
    const hidden = document.hidden || live.parentHidden || sizeless;
    if (sizeless && !sizeCheck) {
      sizeCheck = setTimeout(() => { sizeCheck = null; updateVisibility(); }, 1000);
    }
    if (hidden === live.hidden) return;
    live.hidden = hidden;
    if (hidden) disconnect(); else connect();
  }

  document.addEventListener("visibilitychange", updateVisibility);
  window.addEventListener("resize", updateVisibility);
  window.addEventListener("message", (event) => {
    const message = event.data;
    if (event.source !== window.parent || event.origin !== window.location.origin) return;
    if (!message || message.type !== "nvdashboard:visibility") return;
    live.parentHidden = !message.visible;
    updateVisibility();
  });
  // Ask the JupyterLab tab whether it is shown: a message it sent before this page's script
  // ran (a background tab's "hidden") would otherwise be lost. Outside JupyterLab there is
  // no parent to answer, and the page stays as it is.
  if (window.parent !== window) {
    window.parent.postMessage({ type: "nvdashboard:visibility-request" }, window.location.origin);
  }
  updateVisibility();
  connect();
  return {connect, disconnect, reconnect: () => { disconnect(); connect(); }};
}
