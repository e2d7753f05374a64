// The queue refreshes itself: every few seconds the server renders its rows again (escaped
// there, as every page is) and they replace the old ones. No framework, no CDN.
(function () {
  "use strict";
  var live = document.getElementById("queue-live");
  if (!live) { return; }
  var url = live.getAttribute("data-rows");
  var every = 3000;
  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.redirected) {  // the session ended: go where the server sends us
          window.location.assign(response.url);
          throw new Error("queue refresh: signed out");
        }
        if (!response.ok) { throw new Error("queue refresh: HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var parsed = new DOMParser().parseFromString(html, "text/html");
        var body = parsed.getElementById("queue-body");
        var old = document.getElementById("queue-body");
        if (body && old) { old.replaceWith(document.adoptNode(body)); }
        live.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function (error) { live.setAttribute("data-error", String(error)); })
      .then(function () { window.setTimeout(refresh, every); });
  }
  window.setTimeout(refresh, every);
})();
