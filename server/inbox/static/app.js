// The inbox's own script (SPEC §13): live updates of the pending list over the
// service's server-sent events, one-click decisions without a reload, and the
// waiting times. It never renders an agent's strings itself: rows come from
// the server as HTML its templates escaped (D127).
(function () {
  'use strict';

  var statusEl = document.getElementById('status');
  function say(text) {
    if (statusEl) statusEl.textContent = text;
  }

  function ago(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + 's';
    var m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + (s % 60) + 's';
    var h = Math.floor(m / 60);
    if (h < 48) return h + 'h ' + (m % 60) + 'm';
    return Math.floor(h / 24) + 'd';
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll('time[data-at]').forEach(function (el) {
      var t = Date.parse(el.getAttribute('data-at'));
      if (!isNaN(t)) el.textContent = ago(now - t);
    });
  }

  var rows = document.getElementById('pending-rows');
  var refreshing = false, again = false;
  function refresh() {
    if (!rows) return;
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch('/inbox/pending' + window.location.search, { credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
      .then(function (r) {
        if (r.status === 401) { window.location.assign('/signin'); return null; }
        if (!r.ok) throw new Error('HTTP ' + r.status);
        var n = r.headers.get('X-Pending-Count');
        return r.text().then(function (html) { return { html: html, n: n }; });
      })
      .then(function (res) {
        if (!res) return;
        rows.innerHTML = res.html;
        var count = document.getElementById('pending-count');
        if (count && res.n !== null) count.textContent = res.n;
        var empty = document.getElementById('pending-empty');
        if (empty) empty.hidden = rows.querySelector('tr') !== null;
        tick();
      })
      .catch(function (e) { say('Could not refresh the list: ' + e.message); })
      .finally(function () {
        refreshing = false;
        if (again) { again = false; refresh(); }
      });
  }

  // One click: the form is sent by fetch and the list refreshed; without
  // this script the same form posts and the server redirects back.
  document.addEventListener('submit', function (ev) {
    var form = ev.target;
    if (!form.hasAttribute('data-async')) return;
    ev.preventDefault();
    var buttons = form.querySelectorAll('button');
    buttons.forEach(function (b) { b.disabled = true; });
    fetch(form.action, {
      method: 'POST', credentials: 'same-origin',
      headers: { 'Accept': 'application/json' },
      body: new URLSearchParams(new FormData(form))
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (body) {
        if (!r.ok) throw new Error(body.message || ('HTTP ' + r.status));
        say(body.message || 'Done.');
        var row = form.closest('tr');
        if (row) row.remove();
        refresh();
      });
    }).catch(function (e) {
      say('⚠ ' + e.message);
      buttons.forEach(function (b) { b.disabled = false; });
      refresh();
    });
  });

  if (document.body.getAttribute('data-live') === 'pending' && window.EventSource) {
    var es = new EventSource('/inbox/events');
    ['pending', 'decided', 'terminated'].forEach(function (type) {
      es.addEventListener(type, refresh);
    });
    es.addEventListener('open', function () { document.body.setAttribute('data-connected', 'yes'); refresh(); });
    es.addEventListener('error', function () { document.body.setAttribute('data-connected', 'no'); });
  }

  // Record times in the reader's own time zone, the exact RFC 3339 value on
  // hover (the title the server wrote).
  document.querySelectorAll('time[data-local]').forEach(function (el) {
    var t = new Date(el.getAttribute('datetime'));
    if (isNaN(t.getTime())) return;
    el.textContent = t.toLocaleString(undefined, {
      year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit'
    });
  });

  tick();
  setInterval(tick, 1000);
})();
