// The queue refreshes itself: every few seconds the server renders its rows again (escaped
// there, as every page is) and the page is patched in place to match them, so the operator
// keeps their place (the focused Review link, a selected decision id, the scroll position).
// A row is keyed by its escalation id (data-escalation), any other element by its id: a row
// that stays keeps its element and only what changed in it is updated (its age, its overdue
// state); a new row is inserted where the server put it, a gone row removed; other nodes are
// matched by position. Only the server's nodes are moved, copied or set, never HTML built
// here. No framework, no CDN. A refresh that fails (the server unreachable, an HTTP error, an
// answer without the queue's rows) leaves the rows as they were and says so on the page, with
// the time of the last refresh that worked, until one works again: a queue that stopped
// refreshing never looks live. A refresh that finds the session ended (the server sends it to
// sign in, answers 401, or answers with the sign-in form) leaves for the sign-in page, which
// leads back to the queue (data-sign-in), and refreshes no more.
(function () {
  "use strict";
  var live = document.getElementById("queue-live");
  if (!live) { return; }
  var stale = document.getElementById("queue-stale");
  var signIn = live.getAttribute("data-sign-in");
  var leaving = false;  // the session ended: on the way to sign in
  var every = 3000;
  var lastGood = new Date();  // the page itself came with fresh rows

  function clock(date) {
    return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  function toSignIn() {
    leaving = true;
    window.location.assign(signIn);
  }

  function failed(error) {
    live.setAttribute("data-error", String(error));
    if (stale) {
      stale.textContent = "This list has not refreshed since " + clock(lastGood) + " (" +
        String(error && error.message || error) + "); retrying every " + every / 1000 + " s.";
      stale.hidden = false;
    }
  }

  function key(node) {
    if (node.nodeType !== Node.ELEMENT_NODE) { return null; }
    var escalation = node.getAttribute("data-escalation");
    if (escalation !== null) { return "escalation:" + escalation; }
    return node.id ? "id:" + node.id : null;
  }

  function syncAttributes(old, fresh) {
    var i, name;
    for (i = old.attributes.length - 1; i >= 0; i -= 1) {
      name = old.attributes[i].name;
      if (!fresh.hasAttribute(name)) { old.removeAttribute(name); }
    }
    for (i = 0; i < fresh.attributes.length; i += 1) {
      name = fresh.attributes[i].name;
      if (old.getAttribute(name) !== fresh.attributes[i].value) {
        old.setAttribute(name, fresh.attributes[i].value);
      }
    }
  }

  function sameKind(old, fresh) {
    return old.nodeType === fresh.nodeType && old.nodeName === fresh.nodeName;
  }

  // Make `old` (kept) look like `fresh` (parsed from the server's answer).
  function sync(old, fresh) {
    if (old.nodeType !== Node.ELEMENT_NODE) {
      if (old.nodeValue !== fresh.nodeValue) { old.nodeValue = fresh.nodeValue; }
      return;
    }
    syncAttributes(old, fresh);
    syncChildren(old, fresh);
  }

  function move(parent, node, before) {
    // moveBefore keeps a moved element's focus (not a selection in it); older browsers
    // re-insert it (and it loses its focus). Only a reorder moves a row (the server sorts by
    // asked_at: only rows asked at the same instant could swap)
    if (typeof parent.moveBefore === "function") {
      try { parent.moveBefore(node, before); return; } catch (ignored) { /* re-insert */ }
    }
    parent.insertBefore(node, before);
  }

  function syncChildren(parent, freshParent) {
    var kept = {};       // key -> the old child with it
    var wanted = {};     // the keys the server's answer has
    var child, k, i;
    for (child = parent.firstChild; child; child = child.nextSibling) {
      k = key(child);
      if (k !== null && !(k in kept)) { kept[k] = child; }
    }
    var fresh = Array.prototype.slice.call(freshParent.childNodes);
    for (i = 0; i < fresh.length; i += 1) {
      k = key(fresh[i]);
      if (k !== null) { wanted[k] = true; }
    }
    function doomed(node) {
      var nodeKey = key(node);
      return nodeKey !== null && (!wanted[nodeKey] || kept[nodeKey] !== node);
    }
    var cursor = parent.firstChild;  // every node before it is placed
    for (i = 0; i < fresh.length; i += 1) {
      var next = fresh[i];
      while (cursor && doomed(cursor)) {  // a gone row, removed where it stands
        child = cursor.nextSibling;
        parent.removeChild(cursor);
        cursor = child;
      }
      k = key(next);
      var match = null;
      if (k !== null) {
        if (k in kept && sameKind(kept[k], next)) { match = kept[k]; }
        delete kept[k];
      } else if (cursor && key(cursor) === null && sameKind(cursor, next)) {
        match = cursor;
      }
      if (match === null) {
        parent.insertBefore(document.importNode(next, true), cursor);
        continue;
      }
      if (match !== cursor) {
        // only unkeyed nodes (the whitespace between rows) or gone rows stand between: drop
        // them rather than move the kept element (moving it may take its focus)
        var between = [];
        var reordered = false;
        for (child = cursor; child && child !== match; child = child.nextSibling) {
          if (key(child) !== null && !doomed(child)) { reordered = true; break; }
          between.push(child);
        }
        if (reordered) {
          move(parent, match, cursor);
        } else {
          between.forEach(function (node) { parent.removeChild(node); });
          cursor = match.nextSibling;
        }
      } else {
        cursor = cursor.nextSibling;
      }
      sync(match, next);
    }
    while (cursor) {  // what the answer no longer has
      child = cursor.nextSibling;
      parent.removeChild(cursor);
      cursor = child;
    }
  }

  function refresh() {
    fetch(live.getAttribute("data-rows"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.redirected || response.status === 401) {  // the session ended
          toSignIn();
          throw new Error("queue refresh: signed out");
        }
        if (!response.ok) { throw new Error("queue refresh: HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var parsed = new DOMParser().parseFromString(html, "text/html");
        if (parsed.getElementById("login")) {  // the sign-in form: the session ended
          toSignIn();
          throw new Error("queue refresh: signed out");
        }
        var body = parsed.getElementById("queue-body");
        var old = document.getElementById("queue-body");
        if (!body || !old) { throw new Error("queue refresh: the answer holds no queue"); }
        sync(old, body);
        lastGood = new Date();
        live.removeAttribute("data-error");  // the last refresh worked
        live.setAttribute("data-refreshed", String(lastGood.getTime()));
        if (stale) { stale.hidden = true; stale.textContent = ""; }
      })
      .catch(function (error) { if (!leaving) { failed(error); } })
      .then(function () { if (!leaving) { window.setTimeout(refresh, every); } });
  }
  window.setTimeout(refresh, every);
})();
