// The Aegis lab dashboard. Plain JavaScript, no dependencies: it reads
// /api/info, follows /api/stream (the groups of runs) and each shown run's
// /api/runs/ID/events (server-sent events), and draws the runs in SVG.
'use strict';

const $ = (sel, el = document) => el.querySelector(sel);
const $$ = (sel, el = document) => Array.from(el.querySelectorAll(sel));

const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));

const app = {
  info: null,
  avail: null, // strategy → null (available) or the reason
  token: '',
  groups: [],
  current: null, // the group shown
  pinned: false, // the user chose an older group: do not follow new ones
  compared: null, // the group the comparison shows: picked there, or the last started with several runs
  runs: new Map(), // run id → run state (events, status, end, stream)
  panels: new Map(), // "group:index" → panel element
};

// ---- token and API ----------------------------------------------------------

function readToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem('aegis-token', decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem('aegis-token') || '';
}

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  if (app.token) opts.headers['X-Aegis-Token'] = app.token;
  const res = await fetch(path, opts);
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (!res.ok) {
    if (res.status === 401 || (res.status === 403 && data && data.error === 'wrong token')) askToken();
    throw new Error((data && data.error) || `${res.status} ${res.statusText}`);
  }
  return data;
}

// askToken forgets a token the dashboard refused (or the lack of one) and
// shows the bar to enter it again.
function askToken() {
  app.token = '';
  sessionStorage.removeItem('aegis-token');
  $('#tokenbar').hidden = false;
}

// ---- the controls -----------------------------------------------------------

function renderControls() {
  const box = $('#strategies');
  box.innerHTML = app.info.strategies.map((s) =>
    `<label data-strategy="${esc(s.name)}" title="${esc(s.summary)}"><input type="checkbox" value="${esc(s.name)}"${s.name === 'none' ? ' checked' : ''}>` +
    `<span class="dot"></span>${esc(s.name)}</label>`).join('');
  const d = app.info.defaults;
  $('#nodes').max = app.info.max_nodes;

  $('#presets').innerHTML = app.info.scenarios.map((sc) =>
    `<div class="preset" data-scenario="${esc(sc.name)}"><div class="name"><b>${esc(sc.name)}</b>` +
    `<button type="button" data-preset="${esc(sc.name)}">Run</button></div>` +
    `<p class="seed">${esc(sc.seed)} · ${sc.runs.length} run${sc.runs.length > 1 ? 's' : ''}${sc.parallel > 1 ? `, ${sc.parallel} at a time` : ''}</p>` +
    `<p class="watch">${esc(sc.watch)}</p></div>`).join('');
  $$('#presets button[data-preset]').forEach((b) => b.addEventListener('click', () => startGroup({ scenario: b.dataset.preset })));

  $('#strategytable tbody').innerHTML = app.info.strategies.map((s) =>
    `<tr data-strategy="${esc(s.name)}"><td>${esc(s.name)}</td><td>${esc(s.summary)}</td><td>${esc(s.not_guaranteed)}</td><td class="avail">checking…</td></tr>`).join('');
  if (d) {
    $('#tick').placeholder = d.tick; $('#ttl').placeholder = d.ttl; $('#work').placeholder = d.work; $('#duration').placeholder = d.duration;
  }
  $('#start').addEventListener('click', startFromForm);
  $('#stop').addEventListener('click', stopCurrent);
  $('#runaegis').addEventListener('click', () => startGroup({ scenario: 'aegis' }));
  $('#comparegroup').addEventListener('change', () => { app.compared = $('#comparegroup').value; renderCompare(); });
}

function renderAvailability() {
  for (const s of app.info.strategies) {
    const reason = app.avail ? app.avail[s.name] : undefined;
    const label = $(`#strategies label[data-strategy="${s.name}"]`);
    const cell = $(`#strategytable tr[data-strategy="${s.name}"] td.avail`);
    if (reason === undefined) continue;
    const ok = reason === null;
    label.classList.toggle('unavailable', !ok);
    $('.dot', label).className = 'dot ' + (ok ? 'ok' : 'no');
    if (!ok) {
      label.title = 'unavailable: ' + reason;
      $('input', label).checked = false;
    }
    cell.className = 'avail ' + (ok ? 'ok' : 'no');
    cell.textContent = ok ? 'available' : 'unavailable: ' + reason;
  }
}

function formRuns() {
  const fence = $('input[name=fence]:checked').value;
  const base = {
    tick: $('#tick').value.trim(), ttl: $('#ttl').value.trim(), work: $('#work').value.trim(), duration: $('#duration').value.trim(),
  };
  // Left empty, the default; anything else as typed, so that 0 is refused.
  const nodes = $('#nodes').value.trim();
  if (nodes !== '') base.nodes = Number(nodes);
  const runs = [];
  for (const box of $$('#strategies input:checked')) {
    const s = app.info.strategies.find((x) => x.name === box.value);
    const fences = fence === 'both' && s.fenceable ? [false, true] : [fence !== 'off'];
    for (const f of fences) runs.push({ strategy: s.name, fence: f, ...base });
  }
  return runs;
}

function formMsg(text, error) {
  const m = $('#formmsg');
  m.textContent = text;
  m.classList.toggle('error', !!error);
}

async function startFromForm() {
  const runs = formRuns();
  if (runs.length === 0) { formMsg('Pick at least one strategy.', true); return; }
  await startGroup({ runs });
}

async function startGroup(req) {
  formMsg(req.scenario ? `Starting the ${req.scenario} preset…` : 'Starting…');
  $('#start').disabled = true;
  try {
    const g = await api('POST', '/api/groups', req);
    app.current = g.id;
    app.pinned = false;
    if (g.runs.length > 1) app.compared = g.id;
    mergeGroup(g);
    formMsg('');
    render();
    window.scrollTo({ top: 0, behavior: 'smooth' });
  } catch (e) {
    formMsg(e.message, true);
  } finally {
    $('#start').disabled = false;
  }
}

async function stopCurrent() {
  if (!app.current) return;
  try {
    mergeGroup(await api('POST', `/api/groups/${app.current}/stop`, {}));
    render();
  } catch (e) { formMsg(e.message, true); }
}

function mergeGroup(g) {
  const i = app.groups.findIndex((x) => x.id === g.id);
  if (i >= 0) app.groups[i] = g; else app.groups.push(g);
}

// ---- streams ----------------------------------------------------------------

function followGroups() {
  const es = new EventSource('/api/stream');
  const conn = $('#conn');
  es.addEventListener('open', () => { conn.textContent = 'live'; conn.className = 'conn live'; });
  es.addEventListener('error', () => { conn.textContent = 'reconnecting…'; conn.className = 'conn down'; });
  es.addEventListener('groups', (ev) => {
    app.groups = JSON.parse(ev.data);
    const latest = app.groups[app.groups.length - 1];
    if (latest && (!app.pinned || !app.groups.some((g) => g.id === app.current))) app.current = latest.id;
    render();
  });
}

function runState(id) {
  let rs = app.runs.get(id);
  if (!rs) {
    rs = { id, events: [], status: null, end: null, es: null, queued: false, panel: null, view: null };
    app.runs.set(id, rs);
  }
  return rs;
}

function openRun(rs) {
  if (rs.es || rs.end) return;
  const es = new EventSource(`/api/runs/${rs.id}/events`);
  rs.es = es;
  es.addEventListener('lab', (ev) => { rs.events.push(JSON.parse(ev.data)); schedule(rs); });
  es.addEventListener('status', (ev) => { rs.status = JSON.parse(ev.data); schedule(rs); });
  es.addEventListener('end', (ev) => {
    rs.end = JSON.parse(ev.data);
    es.close();
    rs.es = null;
    schedule(rs);
    renderHistory();
    const g = app.groups.find((x) => x.id === app.current);
    if (g) $('#grouphead small').textContent = '· ' + groupState(g);
    if (g) $('#grouphead').dataset.state = groupState(g);
  });
}

function closeRun(rs) {
  if (rs.es) { rs.es.close(); rs.es = null; }
  // Its events replay from the start when it is shown again.
  if (!rs.end) { rs.events = []; rs.status = null; }
}

function schedule(rs) {
  if (rs.queued) return;
  rs.queued = true;
  requestAnimationFrame(() => { rs.queued = false; if (rs.panel) drawRun(rs); });
}

// ---- the page ---------------------------------------------------------------

function render() {
  renderHistory();
  renderGroup();
  renderCompareChoices();
  renderCompare();
}

function groupTitle(g) {
  if (g.scenario) return `preset ${g.scenario}`;
  const names = [];
  for (const r of g.runs) {
    const n = r.config.strategy + (r.config.fenceable ? (r.config.fenced ? ' fenced' : ' unfenced') : '');
    if (!names.includes(n)) names.push(n);
  }
  return names.join(', ');
}

function groupState(g) {
  // A run's end event can come before the groups stream says so.
  const ended = (r) => ['done', 'not-run', 'unavailable', 'failed'].includes(r.state) || (r.id && app.runs.get(r.id) && app.runs.get(r.id).end);
  if (!g.done && !g.runs.every(ended)) return 'running';
  return g.stopped ? 'stopped' : 'done';
}

function renderHistory() {
  const ol = $('#history');
  ol.innerHTML = app.groups.slice().reverse().map((g) =>
    `<li data-group="${g.id}" class="${g.id === app.current ? 'current' : ''}">${esc(groupTitle(g))} <small>(${groupState(g)})</small></li>`).join('');
  $$('li', ol).forEach((li) => li.addEventListener('click', () => {
    app.current = li.dataset.group;
    app.pinned = app.current !== app.groups[app.groups.length - 1].id;
    render();
  }));
}

function renderGroup() {
  const g = app.groups.find((x) => x.id === app.current);
  const head = $('#grouphead');
  const runsBox = $('#runs');
  if (!g) return;
  head.dataset.state = groupState(g);
  head.innerHTML = `<h2>${esc(groupTitle(g))} <small class="muted">· ${esc(groupState(g))}</small></h2>` +
    (g.seed ? `<p>${esc(g.seed)}</p>` : '') + (g.watch ? `<p class="watch">${esc(g.watch)}</p>` : '');
  // Panels of this group; streams of runs no longer shown are closed.
  const keep = new Set();
  for (const rv of g.runs) {
    const key = `${g.id}:${rv.index}`;
    keep.add(key);
    let panel = app.panels.get(key);
    if (!panel) {
      panel = makePanel(rv);
      app.panels.set(key, panel);
    }
    if (panel.parentNode !== runsBox || runsBox.children[rv.index] !== panel) runsBox.appendChild(panel);
    panel._view = rv;
    if (rv.id) {
      const rs = runState(rv.id);
      rs.view = rv;
      rs.panel = panel;
      openRun(rs);
      drawRun(rs);
    } else {
      drawPending(panel, rv);
    }
  }
  for (const [key, panel] of app.panels) {
    if (keep.has(key)) continue;
    panel.remove();
    app.panels.delete(key);
  }
  for (const rs of app.runs.values()) {
    if (rs.view && rs.view.group !== g.id) { closeRun(rs); rs.panel = null; }
  }
}

function fenceBadge(c) {
  if (!c.fenceable) return '<span class="fence" title="this strategy hands out no token: nothing to fence with">no token</span>';
  return c.fenced ? '<span class="fence on">fenced</span>' : '<span class="fence off">unfenced</span>';
}

function makePanel(rv) {
  const c = rv.config;
  const s = app.info.strategies.find((x) => x.name === c.strategy) || {};
  const p = document.createElement('section');
  p.className = 'run';
  p.dataset.strategy = c.strategy;
  p.dataset.fenced = String(c.fenced);
  const targets = ['holder'].concat(Array.from({ length: c.nodes }, (_, i) => `node${i + 1}`));
  const redis = c.strategy === 'redis' || c.strategy === 'redlock';
  p.innerHTML =
    `<header><h3>${esc(c.strategy)}</h3>${fenceBadge(c)}<span class="state"></span><span class="rid"></span>` +
    `<p class="params">${esc(c.summary)}</p></header>` +
    `<div class="row"><div class="holder"></div><dl class="counts"></dl><div class="verdict" data-checker="pending"></div></div>` +
    `<p class="notguaranteed"><b>${esc(c.strategy)}</b> does not guarantee ${esc(s.not_guaranteed || '')}.</p>` +
    `<div class="chaos"><span class="label">Chaos</span>` +
    `<label>target <select class="chaos-target">${targets.map((t) => `<option>${t}</option>`).join('')}</select></label>` +
    `<label>for <input class="chaos-for" type="text" value="3s" spellcheck="false"></label>` +
    `<button type="button" data-chaos="pause" title="SIGSTOP the target, SIGCONT after the time given">Pause</button>` +
    `<button type="button" data-chaos="kill" title="SIGKILL the target; the lab restarts it">Kill</button>` +
    `<button type="button" data-chaos="partition" title="drop the target's connections to its servers for the time given"${c.strategy === 'sqlite' ? ' disabled' : ''}>Partition</button>` +
    `<label>skew <input class="chaos-skew" type="text" value="+3s" spellcheck="false"></label>` +
    `<button type="button" data-chaos="skew" title="step the target's clock by the skew given (holder: the node holding now)">Clock skew</button>` +
    `<button type="button" data-chaos="failover" title="the primary dies before it replicates a grant; its replica is promoted"${c.strategy === 'redis' ? '' : ' disabled'}>Redis failover</button>` +
    `<button type="button" data-chaos="restart" title="Redis restarts without persistence: keys and token counters gone"${redis ? '' : ' disabled'}>Redis restart</button>` +
    `<button type="button" class="danger" data-stop>Stop run</button></div>` +
    `<p class="msg"></p><div class="lanes"></div><div class="extra"></div>`;
  $$('button[data-chaos]', p).forEach((b) => b.addEventListener('click', () => inject(p, b.dataset.chaos)));
  $('button[data-stop]', p).addEventListener('click', async () => {
    const rv2 = p._view;
    if (!rv2 || !rv2.id) return;
    try { await api('POST', `/api/runs/${rv2.id}/stop`, {}); } catch (e) { panelMsg(p, e.message, true); }
  });
  return p;
}

function panelMsg(p, text, error) {
  const m = $('.msg', p);
  m.textContent = text;
  m.classList.toggle('error', !!error);
}

function seconds(text) {
  const t = text.trim();
  return /^[0-9.]+$/.test(t) ? t + 's' : t;
}

async function inject(p, kind) {
  const rv = p._view;
  if (!rv || !rv.id) return;
  const rs = app.runs.get(rv.id);
  let target = $('.chaos-target', p).value;
  const dur = seconds($('.chaos-for', p).value);
  let spec;
  switch (kind) {
    case 'pause': spec = `pause:${target}@0s+${dur}`; break;
    case 'partition': spec = `partition:${target}@0s+${dur}`; break;
    case 'kill': spec = `kill:${target}@0s`; break;
    case 'skew': {
      if (target === 'holder') {
        const h = rs && rs.status ? rs.status.holder : 0;
        if (!h) { panelMsg(p, 'No node holds right now: pick a node for the clock skew.', true); return; }
        target = `node${h}`;
      }
      let off = seconds($('.chaos-skew', p).value);
      if (!/^[+-]/.test(off)) off = '+' + off;
      spec = `skew:${target}=${off}`;
      break;
    }
    case 'failover': spec = 'failover:redis@0s'; break;
    case 'restart': spec = 'restart:redis@0s'; break;
    default: return;
  }
  panelMsg(p, target === 'holder' ? `${spec}: waiting for a node inside the critical section…` : `${spec}…`);
  try {
    const res = await api('POST', `/api/runs/${rv.id}/chaos`, { spec });
    panelMsg(p, `injected ${res.injected}`);
  } catch (e) {
    panelMsg(p, e.message, true);
  }
}

function drawPending(p, rv) {
  p.dataset.state = rv.state;
  $('.state', p).textContent = rv.state;
  $$('.chaos button', p).forEach((b) => { b.disabled = true; });
  let text = '';
  if (rv.state === 'unavailable') text = 'Unavailable here: ' + rv.unavailable;
  else if (rv.state === 'failed') text = 'Did not start: ' + rv.error;
  else if (rv.state === 'not-run') text = 'Not run: its group was stopped first.';
  else text = rv.state === 'starting' ? 'Starting its servers and node processes…' : 'Waiting for its turn.';
  $('.lanes', p).innerHTML = `<p class="unavailable-note">${esc(text)}</p>`;
}

// ---- one run's picture --------------------------------------------------------

// derive turns a run's events into what the picture shows.
function derive(rs) {
  // A run's catalog holds several jobs: commits, missed and duplicate
  // ticks are a job's (key job#tick); a column shows its tick's worst.
  const jt = (e) => `${e.job || ''}#${e.tick}`;
  const d = { attempts: [], byId: new Map(), commits: {}, missed: new Set(), missedTicks: new Set(), dupTicks: new Set(), bands: [], marks: [], lines: [], leases: [], lastT: 0, fired: 0, jt };
  const openBand = {};
  const openLease = {};
  for (const e of rs.events) {
    d.lastT = Math.max(d.lastT, e.t);
    switch (e.kind) {
      case 'enter': {
        const a = { id: e.attempt, node: e.node, job: e.job, tick: e.tick, token: e.token || 0, start: e.t, end: null, outcome: 'open' };
        d.byId.set(e.attempt, a); d.attempts.push(a);
        break;
      }
      case 'entered': { const a = d.byId.get(e.attempt); if (a) a.read = e.value; break; }
      case 'executed': {
        const a = d.byId.get(e.attempt);
        if (a) { a.end = e.t; a.outcome = 'exec'; a.value = e.value; }
        d.commits[jt(e)] = (d.commits[jt(e)] || 0) + 1;
        break;
      }
      case 'stale': { const a = d.byId.get(e.attempt); if (a) { a.end = e.t; a.outcome = 'stale'; a.detail = e.detail; } break; }
      case 'skipped': { const a = d.byId.get(e.attempt); if (a) { a.skipped = true; } break; }
      case 'abandoned': { const a = d.byId.get(e.attempt); if (a) { a.end = e.t; a.outcome = 'lost'; a.detail = e.detail; } break; }
      case 'acquired': openLease[e.node] = { node: e.node, token: e.token, start: e.t, end: null }; d.leases.push(openLease[e.node]); break;
      case 'released': case 'lost':
        if (openLease[e.node]) { openLease[e.node].end = e.t; openLease[e.node].lost = e.kind === 'lost'; delete openLease[e.node]; }
        break;
      case 'exited':
        for (const a of d.attempts) if (a.node === e.node && a.outcome === 'open') { a.end = e.t; a.outcome = 'lost'; a.detail = 'the process ended: ' + (e.detail || ''); }
        if (openLease[e.node]) { openLease[e.node].end = e.t; delete openLease[e.node]; }
        break;
      case 'tick': d.fired = Math.max(d.fired, e.tick); break;
      case 'missed': d.missed.add(jt(e)); d.missedTicks.add(e.tick); break;
      case 'duplicate': d.dupTicks.add(jt(e)); break;
      case 'chaos': {
        const kind = (e.detail || '').split(':')[0];
        if ((kind === 'pause' || kind === 'partition') && e.node) {
          const b = { kind, node: e.node, start: e.t, end: null, detail: e.detail };
          openBand[e.node] = b; d.bands.push(b);
        } else if (kind === 'kill' && e.node) {
          d.marks.push({ kind: 'kill', node: e.node, t: e.t, detail: e.detail });
        } else if (kind === 'skew' && e.node) {
          d.marks.push({ kind: 'skew', node: e.node, t: e.t, detail: e.detail, label: (e.detail.match(/=([+-]?[0-9.a-zµ]+)/) || [])[1] || '' });
        } else {
          d.lines.push({ kind, t: e.t, detail: e.detail });
        }
        break;
      }
      case 'healed':
        if (openBand[e.node]) { openBand[e.node].end = e.t; delete openBand[e.node]; }
        break;
    }
  }
  d.attempts = d.attempts.filter((a) => !a.skipped);
  return d;
}

function count(label, value, cls) {
  return `<div class="${cls || ''}"><dt>${label}</dt><dd>${value ?? '–'}</dd></div>`;
}

function drawRun(rs) {
  const p = rs.panel;
  const rv = rs.view;
  const st = rs.status;
  const done = !!rs.end;
  const state = done ? 'done' : (rv.state === 'starting' ? 'starting' : 'running');
  p.dataset.state = state;
  p.dataset.run = rs.id;
  $('.state', p).textContent = done ? 'done' : (st ? `running · ${Math.max(0, st.elapsed_s).toFixed(1)} s` : 'running');
  $('.state', p).className = 'state ' + (done ? 'done' : 'running');
  $('.rid', p).textContent = 'run ' + rs.id;
  $$('.chaos button', p).forEach((b) => {
    const kind = b.dataset.chaos;
    const allowed = kind === 'failover' ? rv.config.strategy === 'redis'
      : kind === 'restart' ? (rv.config.strategy === 'redis' || rv.config.strategy === 'redlock')
        : kind === 'partition' ? rv.config.strategy !== 'sqlite' : true;
    b.disabled = done || !allowed;
  });

  // The holder and its token.
  const h = $('.holder', p);
  if (done) h.innerHTML = 'holder <b>–</b>';
  else if (st && st.holder) h.innerHTML = `holder <b>node${st.holder}</b>` + (st.token ? ` · token <b>${st.token}</b>` : '');
  else h.innerHTML = 'holder <b>none</b>';

  // The report's counts: so far from the status, final from the report.
  const r = rs.end && rs.end.report;
  const src = r || st || {};
  $('.counts', p).innerHTML =
    count('ticks', r ? r.ticks : rv.config.ticks) +
    count('executions', src.executions) +
    count('duplicate ticks', src.duplicate_ticks, src.duplicate_ticks ? 'warn' : '') +
    count('duplicates applied', src.duplicates_applied, src.duplicates_applied ? 'bad' : '') +
    count('stale rejected', src.stale_rejected, src.stale_rejected ? 'warn' : '') +
    count('missed ticks', src.missed_ticks) +
    count('lost updates', r ? r.lost_updates : null, r && r.lost_updates ? 'bad' : '');

  const v = $('.verdict', p);
  if (rs.end && rs.end.error) {
    v.dataset.checker = 'unknown';
    v.textContent = 'report failed: ' + rs.end.error;
  } else if (!r) {
    v.dataset.checker = 'pending';
    v.textContent = 'checker: when the run ends';
  } else {
    v.dataset.checker = r.checker;
    const words = { ok: 'checker: ok — the balance\'s history is linearizable', violation: 'checker: violation — two critical sections overlapped', unknown: 'checker: unknown — the check timed out' };
    v.innerHTML = esc(words[r.checker] || r.checker) + (r.visualisation ? ` <a href="${esc(r.visualisation)}" target="_blank" rel="noopener">visualisation</a>` : '') +
      ` <a href="/api/runs/${esc(rs.id)}/report" target="_blank" rel="noopener">JSON report</a>`;
  }
  p.classList.toggle('violation', !!(r && r.checker === 'violation'));
  const extra = $('.extra', p);
  extra.innerHTML = r && r.notes && r.notes.length ? `<ul class="notes">${r.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul>` : '';
  drawLanes(rs);
}

// drawLanes draws the timeline: a lane per node, a column per tick.
function drawLanes(rs) {
  const box = $('.lanes', rs.panel);
  const c = rs.view.config;
  const d = derive(rs);
  const st = rs.status;
  const nodes = c.nodes;
  const tickS = c.tick_s;
  const now = rs.end ? d.lastT : Math.max(d.lastT, st ? st.elapsed_s : 0);
  const tEnd = Math.max(c.ticks * tickS, now) + tickS * 0.25;
  const tStart = -0.1 * tickS;
  const labelW = 118;
  const width = Math.max(560, box.clientWidth || 900);
  const plotW = width - labelW - 8;
  const x = (t) => labelW + ((t - tStart) / (tEnd - tStart)) * plotW;
  const axisH = 20;
  const laneH = 34;
  const lanesH = nodes * laneH;
  const footH = d.lines.length ? 16 : 4;
  const height = axisH + lanesH + footH;
  const laneY = (n) => axisH + (n - 1) * laneH;
  const out = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`);
  out.push('<defs>' +
    '<pattern id="hp" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#7a5bc7" fill-opacity="0.45"/></pattern>' +
    '<pattern id="hc" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><rect width="3" height="6" fill="#138a8a" fill-opacity="0.45"/></pattern>' +
    '</defs>');
  // Columns: one per tick; grey when missed, pink when applied twice.
  const dupKey = (k) => (d.commits[k] || 0) > 1 || d.dupTicks.has(k);
  // The jobs' keys at tick t, the most commits first.
  const keysAt = (t) => Object.keys(d.commits).filter((k) => k.endsWith(`#${t}`)).sort((a, b) => d.commits[b] - d.commits[a]);
  const dup = (t) => keysAt(t).some(dupKey) || [...d.dupTicks].some((k) => k.endsWith(`#${t}`));
  const most = (t) => Math.max(2, ...keysAt(t).map((k) => d.commits[k]));
  for (let t = 1; t <= c.ticks; t++) {
    const x0 = x((t - 1) * tickS);
    const x1 = x(t * tickS);
    const missed = d.missedTicks.has(t);
    const cls = missed ? 'col missed' : dup(t) ? 'col dupcol' : '';
    if (cls) out.push(`<rect class="${cls}" data-tick="${t}" x="${x0}" y="${axisH}" width="${x1 - x0}" height="${lanesH}"><title>tick ${t}: ${missed ? 'missed by a job: nobody executed it within its window' : `a job's tick applied ${most(t)} times`}</title></rect>`);
    out.push(`<line x1="${x0}" y1="${axisH - 4}" x2="${x0}" y2="${axisH + lanesH}" stroke="#e4e7ec"/>`);
    const label = dup(t) ? `${t} ×${most(t)}` : missed ? `${t} missed` : String(t);
    const fill = dup(t) ? '#d62f2f' : t <= d.fired ? '#1d2330' : '#98a2b3';
    if (x1 - x0 > 12 || t % 5 === 1) out.push(`<text x="${(x0 + x1) / 2}" y="${axisH - 7}" text-anchor="middle" font-size="11" fill="${fill}">${esc(label)}</text>`);
  }
  out.push(`<line x1="${x(c.ticks * tickS)}" y1="${axisH - 4}" x2="${x(c.ticks * tickS)}" y2="${axisH + lanesH}" stroke="#e4e7ec"/>`);
  // Lanes.
  for (let n = 1; n <= nodes; n++) {
    const y = laneY(n);
    const ns = st && st.nodes ? st.nodes.find((q) => q.node === n) : null;
    const holder = !rs.end && st && st.holder === n;
    if (holder) out.push(`<rect x="0" y="${y}" width="${width}" height="${laneH}" fill="#eef4fd"/>`);
    out.push(`<line x1="${labelW}" y1="${y + laneH}" x2="${width}" y2="${y + laneH}" stroke="#eef0f3"/>`);
    const stateText = ns && ns.state !== 'running' ? ns.state : '';
    out.push(`<text x="6" y="${y + 14}" font-size="12.5" font-weight="${holder ? 700 : 500}" fill="#1d2330">node${n}${holder ? ' ★' : ''}</text>`);
    const sub = [stateText, holder && st.token ? `token ${st.token}` : '', ns && ns.incarnation > 1 ? `#${ns.incarnation}` : ''].filter(Boolean).join(' · ');
    if (sub) out.push(`<text x="6" y="${y + 27}" font-size="10.5" fill="${stateText === 'paused' ? '#7a5bc7' : '#667085'}">${esc(sub)}</text>`);
  }
  // Leases held: a thin line under the lane.
  for (const l of d.leases) {
    const y = laneY(l.node) + 23;
    const x0 = x(l.start);
    const x1 = x(l.end ?? now);
    out.push(`<line class="lease" x1="${x0}" y1="${y}" x2="${Math.max(x0 + 1, x1)}" y2="${y}" stroke="#8fb4ea" stroke-width="2"><title>node${l.node} holds token ${l.token}</title></line>`);
  }
  // Critical sections.
  for (const a of d.attempts) {
    const y = laneY(a.node) + 4;
    const x0 = x(a.start);
    const x1 = Math.max(x0 + 3, x(a.end ?? now));
    let cls = a.outcome;
    if (cls === 'exec' && dupKey(d.jt(a))) cls = 'dup';
    const what = { exec: 'committed', dup: 'committed: the tick was applied more than once', stale: 'refused by the fence (stale token)', open: 'in the critical section', lost: 'ended without a commit' }[cls];
    const title = `node${a.node}, ${a.job ? a.job + ' ' : ''}tick ${a.tick}${a.token ? `, token ${a.token}` : ''}: ${what}` +
      (a.read !== undefined && a.read !== null ? `; read ${a.read}` : '') + (a.value !== undefined ? `, wrote ${a.value}` : '') + (a.detail ? ` (${a.detail})` : '');
    out.push(`<rect class="mark ${cls}" data-tick="${a.tick}" data-node="${a.node}" x="${x0}" y="${y}" width="${x1 - x0}" height="16" rx="2"><title>${esc(title)}</title></rect>`);
    // Marks sit at their time; the label names their tick (a tick caught
    // up late lands in a later column) and token.
    const tag = cls === 'stale' ? 'stale ' : '';
    const long = `${tag}#${a.tick}${a.token ? ' t' + a.token : ''}`;
    const label = x1 - x0 > long.length * 5.6 + 4 ? long : `${tag}#${a.tick}`;
    if (x1 - x0 > label.length * 5.6 + 4) out.push(`<text x="${x0 + 3}" y="${y + 12}" font-size="10" fill="${cls === 'open' ? '#3b7dd8' : '#fff'}" pointer-events="none">${esc(label)}</text>`);
  }
  // Faults on a node, over the marks: bands (pause, partition) and marks
  // (kill, skew).
  for (const b of d.bands) {
    const y = laneY(b.node);
    const x0 = x(b.start);
    const x1 = x(b.end ?? now);
    const secs = b.end !== null ? ` ${(b.end - b.start).toFixed(1)} s` : '';
    out.push(`<rect class="band ${b.kind}" x="${x0}" y="${y + 1}" width="${Math.max(2, x1 - x0)}" height="${laneH - 2}" fill="url(#${b.kind === 'pause' ? 'hp' : 'hc'})" stroke="${b.kind === 'pause' ? '#7a5bc7' : '#138a8a'}" stroke-width="1"><title>${esc(b.detail)}</title></rect>`);
    out.push(`<text x="${x0 + 3}" y="${y + laneH - 3}" font-size="9.5" font-weight="600" fill="${b.kind === 'pause' ? '#5b3fa8' : '#0e6a6a'}">${b.kind === 'pause' ? 'paused' : 'cut'}${secs}</text>`);
  }
  for (const m of d.marks) {
    const y = laneY(m.node);
    const xm = x(m.t);
    if (m.kind === 'kill') {
      out.push(`<g class="kill"><title>${esc(m.detail)}</title><line x1="${xm - 6}" y1="${y + 6}" x2="${xm + 6}" y2="${y + laneH - 6}" stroke="#1d2330" stroke-width="2.5"/><line x1="${xm + 6}" y1="${y + 6}" x2="${xm - 6}" y2="${y + laneH - 6}" stroke="#1d2330" stroke-width="2.5"/></g>`);
    } else {
      out.push(`<g class="skew"><title>${esc(m.detail)}</title><circle cx="${xm}" cy="${y + laneH / 2}" r="6" fill="#fff" stroke="#b25d00" stroke-width="1.5"/><line x1="${xm}" y1="${y + laneH / 2}" x2="${xm}" y2="${y + laneH / 2 - 4}" stroke="#b25d00" stroke-width="1.5"/><line x1="${xm}" y1="${y + laneH / 2}" x2="${xm + 3}" y2="${y + laneH / 2}" stroke="#b25d00" stroke-width="1.5"/><text x="${xm + 9}" y="${y + laneH / 2 + 4}" font-size="10" fill="#b25d00">${esc(m.label)}</text></g>`);
    }
  }
  // Faults of the whole run (failover, restart, latency): a line across.
  for (const l of d.lines) {
    const xl = x(l.t);
    out.push(`<g class="labline"><title>${esc(l.detail)}</title><line x1="${xl}" y1="${axisH - 2}" x2="${xl}" y2="${axisH + lanesH}" stroke="#c2410c" stroke-width="2" stroke-dasharray="4 3"/>` +
      `<text x="${xl + 3}" y="${axisH + lanesH + 12}" font-size="10.5" fill="#c2410c">${esc(l.kind)}</text></g>`);
  }
  if (!rs.end && now > 0) out.push(`<line x1="${x(now)}" y1="${axisH - 4}" x2="${x(now)}" y2="${axisH + lanesH}" stroke="#3b7dd8" stroke-opacity="0.5"/>`);
  out.push('</svg>');
  box.innerHTML = out.join('');
}

// ---- the comparison -------------------------------------------------------------

function renderCompareChoices() {
  const sel = $('#comparegroup');
  const multi = app.groups.filter((g) => g.runs.length > 1);
  const chosen = app.compared;
  sel.innerHTML = multi.slice().reverse().map((g) => `<option value="${g.id}">${esc(groupTitle(g))} (${g.id})</option>`).join('');
  if (multi.some((g) => g.id === chosen)) sel.value = chosen;
  else {
    const aegis = multi.filter((g) => g.scenario === 'aegis').pop() || multi[multi.length - 1];
    if (aegis) sel.value = aegis.id;
  }
}

function fencedWord(c) { return !c.fenceable ? 'n/a' : c.fenced ? 'fenced' : 'unfenced'; }

function renderCompare() {
  const g = app.groups.find((x) => x.id === $('#comparegroup').value);
  const chart = $('#chart');
  const table = $('#comparetable');
  if (!g) {
    chart.innerHTML = '<p class="unavailable-note">Run the aegis preset (every strategy, fenced and not, under the same pause of the holder; 3 runs at a time, about a minute) or several strategies side by side to compare them here.</p>';
    table.innerHTML = '';
    return;
  }
  const metrics = [
    { key: 'duplicates_applied', label: 'duplicates applied', color: '#d62f2f' },
    { key: 'lost_updates', label: 'lost updates', color: '#7a1f1f' },
    { key: 'stale_rejected', label: 'stale rejected', color: '#e89a0c' },
    { key: 'missed_ticks', label: 'missed ticks', color: '#98a2b3' },
  ];
  let maxV = 1;
  for (const r of g.runs) if (r.report) for (const m of metrics) maxV = Math.max(maxV, r.report[m.key]);
  const labelW = 170;
  const verdictW = 96;
  const width = Math.max(560, chart.clientWidth || 900);
  const barW = width - labelW - verdictW - 40;
  const barH = 5;
  const rowH = metrics.length * (barH + 1) + 8;
  const legendH = 22;
  const height = legendH + g.runs.length * rowH + 4;
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`];
  metrics.forEach((m, i) => {
    out.push(`<rect x="${labelW + i * 150}" y="5" width="12" height="10" fill="${m.color}"/><text x="${labelW + i * 150 + 16}" y="14" font-size="11.5" fill="#1d2330">${m.label}</text>`);
  });
  g.runs.forEach((r, i) => {
    const y = legendH + i * rowH;
    if (i % 2 === 0) out.push(`<rect x="0" y="${y}" width="${width}" height="${rowH}" fill="#f7f8fa"/>`);
    const c = r.config;
    out.push(`<text x="6" y="${y + rowH / 2 + 4}" font-size="12.5" font-weight="600" fill="#1d2330">${esc(c.strategy)}</text>` +
      `<text x="96" y="${y + rowH / 2 + 4}" font-size="11.5" fill="${c.fenceable ? (c.fenced ? '#1f6e40' : '#a32020') : '#667085'}">${fencedWord(c)}</text>`);
    if (!r.report) {
      const why = r.state === 'unavailable' ? 'unavailable: ' + r.unavailable : r.state === 'failed' ? 'failed: ' + r.error : r.state;
      out.push(`<text x="${labelW}" y="${y + rowH / 2 + 4}" font-size="11.5" fill="#667085">${esc(why.length > 110 ? why.slice(0, 110) + '…' : why)}<title>${esc(why)}</title></text>`);
      return;
    }
    metrics.forEach((m, j) => {
      const v = r.report[m.key];
      const w = (v / maxV) * barW;
      const yb = y + 4 + j * (barH + 1);
      if (v > 0) out.push(`<rect class="bar" data-metric="${m.key}" x="${labelW}" y="${yb}" width="${Math.max(2, w)}" height="${barH}" fill="${m.color}"><title>${m.label}: ${v}</title></rect>`);
      if (v > 0) out.push(`<text x="${labelW + Math.max(2, w) + 4}" y="${yb + barH}" font-size="8.5" fill="#475467">${v}</text>`);
    });
    const ck = r.report.checker;
    out.push(`<rect x="${width - verdictW}" y="${y + rowH / 2 - 9}" width="${verdictW - 8}" height="18" rx="9" fill="${ck === 'ok' ? '#e3f4ea' : ck === 'violation' ? '#fde8e8' : '#eef0f3'}"/>` +
      `<text x="${width - verdictW / 2 - 4}" y="${y + rowH / 2 + 4}" text-anchor="middle" font-size="11.5" fill="${ck === 'ok' ? '#1f6e40' : ck === 'violation' ? '#a32020' : '#667085'}">${esc(ck)}</text>`);
  });
  out.push('</svg>');
  chart.innerHTML = out.join('');

  const cols = ['ticks', 'executions', 'duplicate_ticks', 'duplicates_applied', 'stale_rejected', 'missed_ticks', 'lost_updates'];
  table.innerHTML = `<table class="comparetable"><thead><tr><th>strategy</th><th>fenced</th>${cols.map((k) => `<th>${k.replace('_', ' ')}</th>`).join('')}<th>checker</th></tr></thead><tbody>` +
    g.runs.map((r) => {
      const c = r.config;
      if (!r.report) return `<tr><td>${esc(c.strategy)}</td><td>${fencedWord(c)}</td><td colspan="${cols.length + 1}">${esc(r.state === 'unavailable' ? 'unavailable: ' + r.unavailable : r.state)}</td></tr>`;
      return `<tr><td>${esc(c.strategy)}</td><td>${fencedWord(c)}</td>${cols.map((k) => `<td class="n${(k === 'duplicates_applied' || k === 'lost_updates') && r.report[k] ? ' bad' : ''}">${r.report[k]}</td>`).join('')}` +
        `<td>${r.report.visualisation ? `<a href="${esc(r.report.visualisation)}" target="_blank" rel="noopener">${esc(r.report.checker)}</a>` : esc(r.report.checker)}</td></tr>`;
    }).join('') + '</tbody></table>';
}

// ---- start ----------------------------------------------------------------------

async function main() {
  app.token = readToken();
  try {
    app.info = await api('GET', '/api/info');
  } catch (e) {
    $('#grouphead').innerHTML = `<h2>The dashboard's API did not answer</h2><p>${esc(e.message)}</p>`;
    return;
  }
  if (app.info.token_required && !app.token) $('#tokenbar').hidden = false;
  $('#tokensave').addEventListener('click', () => {
    app.token = $('#token').value.trim();
    sessionStorage.setItem('aegis-token', app.token);
    $('#tokenbar').hidden = true;
  });
  renderControls();
  followGroups();
  window.addEventListener('resize', () => { for (const rs of app.runs.values()) if (rs.panel) schedule(rs); renderCompare(); });
  try {
    app.avail = await api('GET', '/api/availability');
    renderAvailability();
  } catch (e) {
    formMsg('Could not check which strategies are available: ' + e.message, true);
  }
}

main();
