// Servo dashboard: keeps the page's live part current from its
// server-sent event stream (one shared, server-side refresher per view;
// the browser reconnects after 2 s when the stream drops).
"use strict";
(function () {
  const live = document.getElementById("live");
  const status = document.getElementById("status");
  if (!live || !live.dataset.live || !window.EventSource) {
    return;
  }
  const show = (text, cls) => {
    if (status) {
      status.textContent = text;
      status.className = "status " + cls;
    }
  };
  const es = new EventSource(live.dataset.live);
  es.addEventListener("open", () => show("live", "on"));
  es.addEventListener("error", () => show("reconnecting…", "off"));
  es.addEventListener("view", (e) => {
    // The fragment is rendered (and escaped) by the server's templates.
    // Keep what the reader opened.
    const open = new Set(Array.from(live.querySelectorAll("details[open][id]"), (d) => d.id));
    live.innerHTML = e.data;
    open.forEach((id) => {
      const d = document.getElementById(id);
      if (d) {
        d.open = true;
      }
    });
    show("live", "on");
    live.dispatchEvent(new CustomEvent("servo:updated"));
  });
  window.addEventListener("pagehide", () => es.close());
})();
