// The Aegis lab dashboard. Plain JavaScript, no dependencies: it reads
// /api/info and follows one server-sent event stream, /api/stream, which
// carries the groups of runs and the events of the runs shown (a browser
// keeps six connections to a host: one stream per run would starve the
// page's requests). timeline.js draws a run, compare.js the comparison.
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
  runs: new Map(), // run id → run state (events, status, end)
  panels: new Map(), // "group:index" → panel element
  stream: null, // the EventSource
  watching: new Set(), // the runs the stream follows
};

// parse reads the stream's JSON keeping tokens exact: run tokens (fire
// time × 1e9 + attempt), etcd revisions and ZooKeeper zxids pass 2^53,
// which a JavaScript number cannot hold, so a token stays the string the
// server sent (where the browser gives the source text to the reviver).
const tokenKeys = new Set(['token', 'held']);
function parse(text) {
  return JSON.parse(text, (k, v, ctx) => (tokenKeys.has(k) && typeof v === 'number' && ctx && ctx.source ? ctx.source : v));
}

function strategyOf(name) { return (app.info && app.info.strategies.find((x) => x.name === name)) || {}; }

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
    `<p class="watch">${esc(sc.watch)}</p><p class="len">${esc(presetLength(sc))}</p></div>`).join('');
  $$('#presets button[data-preset]').forEach((b) => b.addEventListener('click', () => startGroup({ scenario: b.dataset.preset })));

  $('#strategytable tbody').innerHTML = app.info.strategies.map((s) =>
    `<tr data-strategy="${esc(s.name)}"><td>${esc(s.name)}</td><td>${esc(s.summary)}</td><td>${esc(s.not_guaranteed)}</td><td class="avail">checking…</td></tr>`).join('');
  if (d) {
    $('#tick').placeholder = d.tick; $('#ttl').placeholder = d.ttl; $('#work').placeholder = d.work; $('#duration').placeholder = d.duration;
  }
  $('#start').addEventListener('click', startFromForm);
  $('#stop').addEventListener('click', stopCurrent);
  $('#runaegis').addEventListener('click', () => startGroup({ scenario: 'aegis' }));
  $('#comparegroup').addEventListener('change', () => { app.compared = $('#comparegroup').value; app.comparePicked = true; renderCompare(); });
}

// presetLength says how long a preset takes: its runs' own lengths, a
// wave at a time (never the time since it started). A run lasts its ticks,
// then its last tick's window and one tick more, when its nodes exit: the
// aegis preset's runs have 8 s of ticks and take about 15 s each
// (measured: docs/dashboard.md).
function presetLength(sc) {
  const per = sc.runs.map((r) => r.ticks * r.tick_s);
  // A second more for its start: nodes ready, the catalog in effect.
  const whole = sc.runs.map((r) => r.ticks * r.tick_s + r.window_s + r.tick_s + 1);
  const waves = Math.ceil(sc.runs.length / Math.max(1, sc.parallel));
  const longest = Math.max(...per);
  const shortest = Math.min(...per);
  const each = shortest === longest ? `${longest.toFixed(0)} s` : `${shortest.toFixed(0)}–${longest.toFixed(0)} s`;
  const total = waves * Math.max(...whole);
  const about = total < 180 ? `about ${Math.round(total / 5) * 5} s` : `about ${Math.round(total / 60)} min`;
  return sc.runs.length === 1 ? `one run of ${per[0].toFixed(0)} s of ticks: ${about} with its last window`
    : `${sc.runs.length} runs of ${each} of ticks, ${waves} wave${waves > 1 ? 's' : ''}: ${about}`;
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
  if (runs.length > app.info.max_active) { formMsg(`${runs.length} runs: at most ${app.info.max_active} go at once; pick fewer strategies (or fence on or off instead of both).`, true); return; }
  await startGroup({ runs });
}

async function startGroup(req) {
  formMsg(req.scenario ? `Starting the ${req.scenario} preset…` : 'Starting…');
  $('#start').disabled = true;
  try {
    const g = await api('POST', '/api/groups', req);
    app.current = g.id;
    app.pinned = false;
    if (g.runs.length > 1) { app.compared = g.id; app.comparePicked = false; }
    mergeGroup(g);
    formMsg('');
    render();
    // The run's panel at the top of the window, its lanes under its
    // controls: the Pause a student presses next is beside what it shows.
    const first = $('#runs .run');
    if (first) first.scrollIntoView({ block: 'start' }); else window.scrollTo({ top: 0 });
    restream();
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

// ---- the stream ---------------------------------------------------------------

// restream (re)opens the page's one stream when the runs shown need one it
// does not follow: each followed run resumes after the events it has.
function restream(force) {
  const want = new Set();
  const g = app.groups.find((x) => x.id === app.current);
  if (g) for (const rv of g.runs) if (rv.id && !runState(rv.id).end) want.add(rv.id);
  const missing = [...want].some((id) => !app.watching.has(id));
  if (app.stream && !force && !missing) return;
  if (app.stream) app.stream.close();
  const watch = [...want].map((id) => `${id}:${runState(id).events.length}`).join(',');
  const es = new EventSource('/api/stream' + (watch ? '?watch=' + encodeURIComponent(watch) : ''));
  app.stream = es;
  app.watching = want;
  const conn = $('#conn');
  es.addEventListener('open', () => { conn.textContent = 'live'; conn.className = 'conn live'; });
  es.addEventListener('error', () => {
    if (app.stream !== es) return;
    // Reopened by hand, so that each run resumes where it is.
    es.close();
    app.stream = null;
    conn.textContent = 'reconnecting…'; conn.className = 'conn down';
    setTimeout(() => { if (!app.stream) restream(true); }, 1000);
  });
  es.addEventListener('groups', (ev) => {
    app.groups = parse(ev.data);
    const latest = app.groups[app.groups.length - 1];
    if (latest && (!app.pinned || !app.groups.some((x) => x.id === app.current))) app.current = latest.id;
    render();
  });
  es.addEventListener('lab', (ev) => {
    const b = parse(ev.data);
    const rs = runState(b.run);
    const skip = rs.events.length - b.from; // events it has already
    if (skip < 0) { restream(true); return; }
    for (const e of b.events.slice(skip)) rs.events.push(e);
    schedule(rs);
  });
  es.addEventListener('status', (ev) => { const b = parse(ev.data); const rs = runState(b.run); rs.status = b.status; schedule(rs); scheduleCompare(); });
  es.addEventListener('end', (ev) => {
    const b = parse(ev.data);
    const rs = runState(b.run);
    rs.end = b;
    schedule(rs);
    renderHistory();
    const cur = app.groups.find((x) => x.id === app.current);
    if (cur) { $('#grouphead').dataset.state = groupState(cur); const sm = $('#grouphead small'); if (sm) sm.textContent = '· ' + groupState(cur); }
    renderCompare();
  });
}

function runState(id) {
  let rs = app.runs.get(id);
  if (!rs) {
    rs = { id, events: [], status: null, end: null, queued: false, panel: null, view: null, zoom: 'fit' };
    app.runs.set(id, rs);
  }
  return rs;
}

// schedule redraws a run's panel: at most four times a second, and only
// while it is on screen (twelve runs side by side redrawn on each status
// would keep the browser's main thread busy, and the page's own requests
// waiting); a panel off screen is redrawn when it scrolls into view.
const redrawEvery = 250; // ms
function schedule(rs) {
  if (rs.queued) return;
  if (rs.panel && !rs.panel._visible && !rs.end) { rs.dirty = true; return; }
  rs.queued = true;
  const wait = Math.max(0, (rs.drawnAt || 0) + redrawEvery - performance.now());
  setTimeout(() => requestAnimationFrame(() => {
    rs.queued = false;
    rs.dirty = false;
    rs.drawnAt = performance.now();
    if (rs.panel) drawRun(rs);
  }), wait);
}

// The panels on screen (with a margin): observed once each.
const onScreen = new IntersectionObserver((entries) => {
  for (const en of entries) {
    en.target._visible = en.isIntersecting;
    const rv = en.target._view;
    const rs = rv && rv.id ? app.runs.get(rv.id) : null;
    if (en.isIntersecting && rs && rs.dirty) schedule(rs);
  }
}, { rootMargin: '300px' });

// ---- the page ---------------------------------------------------------------

function render() {
  renderHistory();
  renderGroup();
  renderCompareChoices();
  renderCompare();
  restream();
}

function groupTitle(g) {
  if (g.scenario) return `preset ${g.scenario}`;
  const names = [];
  for (const r of g.runs) {
    const n = r.config.strategy + (r.config.fenceable ? (r.config.fenced ? ' fenced' : ' unfenced') : '');
    if (!names.includes(n)) names.push(n);
  }
  if (names.length <= 4) return names.join(', ');
  // Many runs: the strategies once each.
  const strategies = [...new Set(g.runs.map((r) => r.config.strategy))];
  const both = g.runs.some((r) => r.config.fenced) && g.runs.some((r) => r.config.fenceable && !r.config.fenced);
  return `${g.runs.length} runs: ${strategies.join(', ')}${both ? ', fenced and not' : ''}`;
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
    (g.seed ? `<p>${esc(g.seed)}</p>` : '') + (g.watch ? `<p class="watch"><b>What to watch:</b> ${esc(g.watch)}</p>` : '');
  // Several runs: the comparison sits right under the group's head, in
  // view, and follows the group.
  const compare = $('#compare');
  if (g.runs.length > 1) {
    if (compare.previousElementSibling !== head) head.after(compare);
    if (!app.comparePicked) app.compared = g.id;
  } else if (compare.parentNode !== $('#comparehome')) $('#comparehome').appendChild(compare);
  const keep = new Set();
  for (const rv of g.runs) {
    const key = `${g.id}:${rv.index}`;
    keep.add(key);
    let panel = app.panels.get(key);
    if (!panel) {
      panel = makePanel(rv, g);
      panel._visible = true; // until the observer says otherwise
      onScreen.observe(panel);
      app.panels.set(key, panel);
    }
    if (panel.parentNode !== runsBox || runsBox.children[rv.index] !== panel) runsBox.appendChild(panel);
    panel._view = rv;
    if (rv.id) {
      const rs = runState(rv.id);
      rs.view = rv;
      rs.panel = panel;
      drawRun(rs);
    } else {
      drawPending(panel, rv);
    }
  }
  for (const [key, panel] of app.panels) {
    if (keep.has(key)) continue;
    onScreen.unobserve(panel);
    panel.remove();
    app.panels.delete(key);
  }
  for (const rs of app.runs.values()) if (rs.view && rs.view.group !== g.id) rs.panel = null;
}

function fenceBadge(c) {
  if (!c.fenceable) return '<span class="fence" title="this strategy hands out no token: nothing to fence with">no token</span>';
  return c.fenced ? '<span class="fence on">fenced</span>' : '<span class="fence off">unfenced</span>';
}

// The faults a run's panel offers: [kind, label, title, allowed(strategy)].
const serverFaults = [
  ['failover', 'Redis failover', 'the primary dies right after it grants the holder its lease, before replicating it; its replica is promoted and the nodes move to it', (s) => s.redis === 'primary'],
  ['restart', 'Redis restart', 'the Redis server the nodes use restarts without persistence: keys and token counters gone', (s) => !!s.redis],
  ['restart-majority', 'Restart a Redlock majority', 'a majority of the Redlock primaries restart at once without persistence', (s) => s.redis === 'quorum'],
  ['crash', 'Crash PostgreSQL', "SIGKILL the lab's PostgreSQL and its backends; it restarts with crash recovery", (s) => s.name !== 'sqlite'],
  ['kill-etcd', 'Kill the etcd leader', 'SIGKILL the etcd leader; it comes back after 2 s', (s) => (s.servers || []).includes('etcd')],
  ['kill-zookeeper', 'Kill a ZooKeeper member', 'SIGKILL the ZooKeeper member most sessions are on; it comes back after 2 s', (s) => (s.servers || []).includes('zookeeper')],
  ['kill-nats', 'Kill the NATS stream leader', "SIGKILL the NATS server leading the lease bucket's stream; it comes back after 2 s", (s) => (s.servers || []).includes('nats')],
];

function makePanel(rv, g) {
  const c = rv.config;
  const s = strategyOf(c.strategy);
  const p = document.createElement('section');
  p.className = 'run';
  p.dataset.strategy = c.strategy;
  p.dataset.fenced = String(c.fenced);
  // committer: the next node to commit, right after its commit; leader
  // (leader mode): the node that enqueues the ticks.
  const targets = ['holder', 'writer', 'committer'].concat(s.holds === 'queue job' ? ['leader'] : []).concat(Array.from({ length: c.nodes }, (_, i) => `node${i + 1}`));
  // Side by side with others, a run's panel starts compact: its catalog
  // and guidance fold away.
  const many = g.runs.length > 2;
  const cut = ['all its servers'].concat(s.name === 'sqlite' ? [] : ['postgres']).concat((s.servers || []).filter((k) => k !== 'postgres'));
  p.innerHTML =
    `<header><h3>${esc(c.strategy)}</h3>${fenceBadge(c)}<span class="state"></span><span class="rid"></span>` +
    `<p class="params">${esc(c.summary)}</p></header>` +
    `<div class="row"><div class="holder"></div><dl class="counts"></dl><div class="verdict" data-checker="pending"></div></div>` +
    `<p class="notguaranteed"><b>${esc(c.strategy)}</b> does not guarantee ${esc(s.not_guaranteed || '')}.</p>` +
    (!g.scenario && c.watch ? (many ? `<details class="watch"><summary><b>What to watch</b></summary>${esc(c.watch)}</details>` : `<p class="watch"><b>What to watch:</b> ${esc(c.watch)}</p>`) : '') +
    `<div class="chaos"><span class="label">Chaos</span>` +
    `<label>target <select class="chaos-target">${targets.map((t) => `<option>${t}</option>`).join('')}</select></label>` +
    `<label>for <input class="chaos-for" type="text" value="3s" spellcheck="false"></label>` +
    `<button type="button" data-chaos="pause" title="SIGSTOP the target, SIGCONT after the time given (holder: the node inside the critical section, kept stopped longer until another node has read its job's ledger with a greater token; writer: the node inside its write)">Pause</button>` +
    `<button type="button" data-chaos="kill" title="SIGKILL the target; the lab restarts it">Kill</button>` +
    `<button type="button" data-chaos="partition" title="drop the target's connections to the servers chosen for the time given"${s.name === 'sqlite' ? ' disabled' : ''}>Partition</button>` +
    `<label>from <select class="chaos-server">${cut.map((k) => `<option value="${k.startsWith('all') ? '' : k}">${k}</option>`).join('')}</select></label>` +
    `<label>clock <input class="chaos-skew" type="text" value="+3s" spellcheck="false"></label>` +
    `<button type="button" data-chaos="skew" title="set the target's clock this far off real time, from now on (holder: the node holding now)">Set clock skew</button></div>` +
    `<div class="chaos servers"><span class="label">Servers</span>` +
    serverFaults.map(([kind, label, title, ok]) => `<button type="button" data-chaos="${kind}" title="${esc(title)}"${ok(s) ? '' : ' hidden'}>${esc(label)}</button>`).join('') +
    `<button type="button" class="danger" data-stop>Stop run</button></div>` +
    `<p class="msg" role="status"></p>` +
    `<details class="catalog"><summary>Catalog <small>(the schedules every node runs: edit them live)</small></summary><table class="catalogtable"><thead><tr><th>schedule</th><th>every</th><th>work</th><th>keep-alive</th><th>state</th><th>edit</th></tr></thead><tbody></tbody>` +
    `<tfoot><tr><td><input class="add-name" type="text" placeholder="new-schedule" spellcheck="false"></td><td><input class="add-every" type="text" value="${esc(c.tick)}" spellcheck="false"></td>` +
    `<td><input class="add-work" type="text" value="${esc(c.work)}" spellcheck="false"></td><td colspan="2"></td><td><button type="button" data-add>Add schedule</button></td></tr></tfoot></table></details>` +
    `<div class="zoom"><label>zoom <select class="zoomsel"><option value="fit">fit (40 px a tick at least)</option><option value="2x">96 px a tick</option><option value="4x">192 px a tick</option></select></label>` +
    `<span class="key">marks: <i class="sw exec"></i>#tick, its token below · <i class="sw stale"></i>refused: its token &lt; the store's · <i class="sw lease"></i>${esc(holdsWords[s.holds] || 'no grant drawn')}` +
    `${s.holds === 'lease' ? ' · <b class="exp">expired</b>: the server let it go · ▲ the successor\'s grant' : ''}</span>` +
    `<span class="ranknote" hidden>tokens here are long (etcd revisions, ZooKeeper zxids, run tokens): r1, r2… are each job's tokens in order, the tooltips have them</span></div>` +
    `<div class="lanes"></div><div class="extra"></div>`;
  $$('button[data-chaos]', p).forEach((b) => b.addEventListener('click', () => inject(p, b.dataset.chaos)));
  $('button[data-stop]', p).addEventListener('click', async () => {
    const rv2 = p._view;
    if (!rv2 || !rv2.id) return;
    try { await api('POST', `/api/runs/${rv2.id}/stop`, {}); panelMsg(p, 'stopping: the run ends now and its report covers what ran'); } catch (e) { panelMsg(p, e.message, true); }
  });
  $('.zoomsel', p).addEventListener('change', (ev) => {
    const rv2 = p._view;
    if (rv2 && rv2.id) { const rs = runState(rv2.id); rs.zoom = ev.target.value; drawRun(rs); }
  });
  $('button[data-add]', p).addEventListener('click', () => {
    const name = $('.add-name', p).value.trim();
    const every = seconds($('.add-every', p).value);
    const work = seconds($('.add-work', p).value);
    if (!name) { panelMsg(p, 'Name the new schedule (lower case, digits, - and _).', true); return; }
    edit(p, name, `${every}/${work}`, `Add schedule ${name}`);
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
  const server = $('.chaos-server', p).value;
  let spec;
  switch (kind) {
    case 'pause': spec = `pause:${target}@0s+${dur}`; break;
    case 'partition': spec = `partition:${target}@0s+${dur}${server ? '/' + server : ''}`; break;
    case 'kill': spec = `kill:${target}@0s`; break;
    case 'skew': {
      if (!target.startsWith('node')) {
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
    case 'restart-majority': spec = 'restart:redlock@0s'; break;
    case 'crash': spec = 'crash:postgres@0s'; break;
    case 'kill-etcd': spec = 'kill:etcd@0s'; break;
    case 'kill-zookeeper': spec = 'kill:zookeeper@0s'; break;
    case 'kill-nats': spec = 'kill:nats@0s'; break;
    default: return;
  }
  if (kind === 'pause' || kind === 'partition') showLanes(p);
  const waits = kind === 'failover' ? ': waiting for the next holder to be granted its lease…'
    : target === 'holder' && kind !== 'skew' ? ': waiting for a node inside the critical section…'
      : target === 'writer' ? ': waiting for a node inside its write…'
        : target === 'committer' && kind !== 'skew' ? ': waiting for the next node to commit…' : '…';
  const button = $(`button[data-chaos="${kind}"]`, p).textContent;
  await post(p, spec, waits, ['pause', 'partition', 'kill', 'skew'].includes(kind) ? `${button} ${target}` : button);
}

// showLanes scrolls the panel's lanes into the window when they are not
// in it: a fault is watched on them.
function showLanes(p) {
  const lanes = $('.lanes', p);
  const box = lanes.getBoundingClientRect();
  if (box.top < 0 || box.top > window.innerHeight - Math.min(box.height, window.innerHeight / 2)) lanes.scrollIntoView({ block: 'nearest' });
}

// edit sends a catalog edit of the run: a fault like any other, drawn on
// the job's lanes.
async function edit(p, job, spec, what) {
  await post(p, `edit:${job}@0s=${spec}`, '…', what);
}

// post injects the fault spec; an error is shown after what the student
// pressed (what), in the server's words: never the spec, which they did
// not type.
async function post(p, spec, waits, what) {
  const rv = p._view;
  panelMsg(p, spec + waits);
  try {
    const res = await api('POST', `/api/runs/${rv.id}/chaos`, { spec });
    panelMsg(p, `injected ${res.injected}`);
  } catch (e) {
    panelMsg(p, `${what}: ${e.message}`, true);
  }
}

// catalogRows is the run's catalog now: its first rows with the edits
// made since, from the events.
function catalogRows(rs, d) {
  const rows = (rs.view.config.jobs || []).map((j) => ({ name: j.name, every: j.every, work: j.work, keep: j.keep_alive, paused: false, added: false }));
  for (const ed of d.edits) {
    let r = rows.find((x) => x.name === ed.job);
    const spec = ed.spec;
    if (!r) {
      const [every, work, opt] = spec.split('/');
      rows.push({ name: ed.job, every, work: work || '', keep: opt !== 'no-keep-alive', paused: false, added: true });
      continue;
    }
    if (spec === 'pause') r.paused = true;
    else if (spec === 'resume') r.paused = false;
    else r.every = spec.split('/')[0];
  }
  return rows;
}

function drawCatalog(rs, d, done) {
  const body = $('.catalogtable tbody', rs.panel);
  const rows = catalogRows(rs, d);
  const sig = JSON.stringify([rows, done]);
  if (body.dataset.sig === sig) return; // do not redraw under the user's typing
  body.dataset.sig = sig;
  body.innerHTML = rows.map((r) => `<tr data-job="${esc(r.name)}"><td>${esc(r.name)}${r.added ? ' <small>(added)</small>' : ''}</td><td>${esc(r.every)}</td><td>${esc(r.work)}</td>` +
    `<td>${r.keep ? 'on' : 'off'}</td><td class="${r.paused ? 'paused' : ''}">${r.paused ? 'paused' : 'active'}</td>` +
    `<td><input class="every" type="text" value="${esc(r.every)}" spellcheck="false" aria-label="new cadence of ${esc(r.name)}"><button type="button" data-every${done ? ' disabled' : ''}>Set every</button>` +
    `<button type="button" data-pause="${r.paused ? 'resume' : 'pause'}"${done ? ' disabled' : ''} title="${r.paused ? 'resume the schedule: it fires again' : 'pause the schedule: no node fires it until it is resumed'}">${r.paused ? 'Resume schedule' : 'Pause schedule'}</button></td></tr>`).join('');
  for (const tr of $$('tr', body)) {
    const job = tr.dataset.job;
    $('button[data-every]', tr).addEventListener('click', () => edit(rs.panel, job, seconds($('input.every', tr).value), `Set every of ${job}`));
    $('button[data-pause]', tr).addEventListener('click', (ev) => edit(rs.panel, job, ev.target.dataset.pause, `${ev.target.textContent} ${job}`));
  }
  $('button[data-add]', rs.panel).disabled = done;
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

// ---- one run's panel ----------------------------------------------------------

// jobTicks is how many job ticks the run's catalog has as it starts (the
// report's ticks: each job's fire times, summed).
function jobTicks(c) {
  if (!c.jobs || !c.jobs.length) return c.ticks;
  // A job every k ticks fires on the clock's multiples of its cadence: k
  // ticks hold one, so ticks/k, rounded up or down by the phase (and the
  // catalog edits to come); the report counts them.
  return c.jobs.reduce((n, j) => n + Math.ceil(c.ticks / Math.max(1, Math.round(j.every_s / c.tick_s))), 0);
}

// count is one of the run's counts, with its definition on hover.
function count(key, label, value, cls, title) {
  return `<div class="${cls || ''}" data-count="${key}" title="${esc(title)}"><dt>${label}</dt><dd>${value ?? '–'}</dd></div>`;
}

// countTitles defines each count, with the run's own numbers.
function countTitles(src, ticks, final) {
  const n = (v) => v ?? 0;
  const plural = (v, one, many) => `${v} ${v === 1 ? one : many}`;
  const dupOnce = Math.max(0, n(src.duplicate_ticks) - n(src.duplicates_applied));
  return {
    ticks: final ? `${ticks} job ticks: each job's fire times in the run, summed (a job every 2 ticks has half as many)` : `${ticks} job ticks expected: each job's fire times, summed; the report counts them (the clock's phase and catalog edits move it by a few)`,
    executions: `executions ${n(src.executions)} for ${ticks} ticks: entries into a job's critical section` +
      (n(src.duplicate_ticks) ? `; ${plural(n(src.duplicate_ticks), 'tick', 'ticks')} entered more than once, ${n(src.duplicates_applied)} of them applied more than once${dupOnce ? `, ${dupOnce} not (yet) applied twice: the other entry was refused by the fence, ended without a commit${final ? '' : ' or is still going'}` : ''}` : ''),
    duplicate_ticks: 'ticks more than one node entered: harmless when only one of them commits',
    duplicates_applied: 'ticks whose effect was committed more than once: the harm a fence prevents',
    stale_rejected: 'writes (or reads) the fence refused: a token lower than the one the store holds, or an equal one from another holder',
    missed_ticks: "ticks nobody executed within their window: the liveness a refusal or a dead holder costs",
    lost_updates: final ? 'committed effects minus the final ledger: an update overwritten by a write that had not read it' : 'counted from the store when the run ends',
    refires: final ? `ticks run again after they had committed (a new leader, a restarted replica, a lease that forgot), ${n(src.retried_refires)} of them by a reaper's retry; counted from the store and from the nodes' events` : 'counted from the store when the run ends',
  };
}

function drawRun(rs) {
  const p = rs.panel;
  const rv = rs.view;
  const st = rs.status;
  const done = !!rs.end;
  const c = rv.config;
  const state = done ? 'done' : (rv.state === 'starting' ? 'starting' : 'running');
  p.dataset.state = state;
  p.dataset.run = rs.id;
  // The run's own length: its ticks, from its first tick (a preset's
  // later runs start later).
  const span = c.ticks * c.tick_s;
  const el = st ? Math.max(0, st.elapsed_s) : 0;
  const fired = rs.derived ? rs.derived.fired : 0;
  const stopped = done && fired > 0 && fired < c.ticks;
  $('.state', p).textContent = done ? (stopped ? `stopped · ${fired} of ${c.ticks} ticks of ${c.tick} fired` : `done · ${c.ticks} ticks of ${c.tick}`) : !st ? 'running'
    : el <= span ? `running · ${el.toFixed(1)} of ${span.toFixed(0)} s` : `running · ${el.toFixed(1)} s: the ticks are done, the last windows close`;
  $('.state', p).className = 'state ' + (done ? 'done' : 'running');
  $('.rid', p).textContent = 'run ' + rs.id;
  const s = strategyOf(c.strategy);
  $$('.chaos button[data-chaos]', p).forEach((b) => {
    const kind = b.dataset.chaos;
    const sf = serverFaults.find((f) => f[0] === kind);
    const allowed = sf ? sf[3](s) : kind === 'partition' ? c.strategy !== 'sqlite' : true;
    b.disabled = done || !allowed;
  });
  $('button[data-stop]', p).disabled = done;

  // The holder and its token.
  const h = $('.holder', p);
  if (done) h.innerHTML = 'holder <b>–</b>';
  else if (st && st.holder) h.innerHTML = `holder <b>node${st.holder}</b>` + (st.job ? ` · ${esc(st.job)}` : '') + (st.token && st.token !== '0' ? ` · token <b>${st.token}</b>` : '');
  else h.innerHTML = 'holder: <b>nobody now</b>';

  // The report's counts: so far from the status, final from the report.
  const r = rs.end && rs.end.report;
  const src = r || st || {};
  const ticks = r ? r.ticks : '≈' + jobTicks(c);
  const tt = countTitles(src, ticks, !!r);
  $('.counts', p).innerHTML =
    count('ticks', 'ticks', ticks, '', tt.ticks) +
    count('executions', 'executions', src.executions, '', tt.executions) +
    count('duplicate_ticks', 'duplicate ticks', src.duplicate_ticks, src.duplicate_ticks ? 'warn' : '', tt.duplicate_ticks) +
    count('duplicates_applied', 'duplicates applied', src.duplicates_applied, src.duplicates_applied ? 'bad' : '', tt.duplicates_applied) +
    count('stale_rejected', 'stale rejected', src.stale_rejected, src.stale_rejected ? 'warn' : '', tt.stale_rejected) +
    count('missed_ticks', 'missed ticks', src.missed_ticks, '', tt.missed_ticks) +
    count('lost_updates', 'lost updates', r ? r.lost_updates : null, r && r.lost_updates ? 'bad' : '', tt.lost_updates) +
    count('refires', 're-fires', r ? r.refires : null, r && r.refires ? 'bad' : '', tt.refires);

  const v = $('.verdict', p);
  if (rs.end && rs.end.error) {
    v.dataset.checker = 'unknown';
    v.textContent = 'report failed: ' + rs.end.error;
  } else if (!r) {
    v.dataset.checker = 'pending';
    v.textContent = 'checker: when the run ends';
  } else {
    v.dataset.checker = r.checker;
    v.dataset.verdict = r.verdict;
    const words = { ok: 'checker: ok — every job\'s ledger history is linearizable', violation: 'checker: violation — a tick applied twice, an update lost or a stale token accepted', unknown: 'checker: unknown — the check timed out' };
    v.innerHTML = esc(words[r.checker] || r.checker) + (r.visualisation ? ` <a href="${esc(r.visualisation)}" target="_blank" rel="noopener">visualisation</a>` : '') +
      ` <a href="/api/runs/${esc(rs.id)}/report" target="_blank" rel="noopener">JSON report</a>` +
      (r.store_agrees ? ' <span class="agree" title="SQL over the audit and ledger tables counts the same duplicates, lost updates and re-fires">· the store agrees</span>' : ` <span class="disagree">· the store disagrees: ${esc(r.disagreement || '')}</span>`);
  }
  p.classList.toggle('violation', !!(r && r.checker === 'violation'));
  const extra = $('.extra', p);
  const harmWords = { duplicate: 'a tick applied twice', 'retried-duplicate': 'a tick applied again by a retry of a run whose end was lost', 're-fire': 'a tick run again after it had committed', 'lost-update': 'an update lost', 'stale-accepted': 'a stale token accepted' };
  const harms = r && r.harms && r.harms.length ? `<p class="harms">Harm: ${r.harms.map((x) => esc(harmWords[x] || x)).join(', ')}.</p>` : '';
  const why = r && c.fenced && !r.stale_rejected ? `<p class="why"><b>No refusal:</b> ${esc(whyNoRefusal(rs.events))}</p>` : '';
  const inconclusive = r && r.verdict === 'inconclusive' ? `<p class="inconclusive">Inconclusive: this run proves nothing — ${(r.inconclusive || []).map(esc).join('; ')}.</p>` : '';
  extra.innerHTML = harms + inconclusive + why + jobsTable(r) + (r && r.notes && r.notes.length ? `<ul class="notes">${r.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul>` : '');
  drawLanes(rs);
  extra.insertAdjacentHTML('beforeend', causeNotes(rs.derived, c.tick_s));
  $('.ranknote', p).hidden = !rs.derived.long;
  drawCatalog(rs, rs.derived, done);
}

// whyNoRefusal says, from a fenced run's events, why its fence refused
// nothing: for each node paused or cut off, whether it was inside a
// critical section, whether another node read that job's ledger with a
// greater token before it came back, and what became of its write.
function whyNoRefusal(events) {
  const faults = events.filter((e) => e.kind === 'chaos' && e.node && /^(pause|partition):/.test(e.detail || ''));
  if (!faults.length) return 'no node was paused or cut off in this run, so no holder wrote late: the fence had nothing to refuse.';
  const greater = (a, b) => { try { return BigInt(String(a || 0)) > BigInt(String(b || 0)); } catch (e) { return false; } };
  const secs = (t) => `${Number(t).toFixed(2)} s`;
  const outcome = new Set(['executed', 'stale', 'abandoned']);
  const why = faults.map((f) => {
    const who = `node${f.node}`;
    const what = f.detail.startsWith('pause') ? 'paused' : 'cut off';
    const back = events.find((e) => e.kind === 'healed' && e.node === f.node && e.t >= f.t);
    const end = back ? back.t : Infinity;
    const woke = back ? `${f.detail.startsWith('pause') ? 'woke' : 'was reconnected'} at ${secs(back.t)}` : 'came back';
    // The section it was inside: entered before the fault, no outcome yet.
    const inside = events.filter((e) => e.kind === 'entered' && e.node === f.node && e.t <= f.t &&
      !events.some((o) => o.attempt === e.attempt && outcome.has(o.kind) && o.t <= f.t)).pop();
    if (!inside) return `${who} was ${what} at ${secs(f.t)} outside a critical section (it had read no job's ledger): it had no write to make late`;
    const job = inside.job;
    const tok = inside.token && inside.token !== '0' ? ` t${inside.token}` : '';
    const later = (e) => e.job === job && e.node !== f.node && e.t > f.t && e.t <= end && (!inside.token || inside.token === '0' || greater(e.token, inside.token));
    const read = events.find((e) => e.kind === 'entered' && later(e));
    if (!read) {
      const granted = events.find((e) => e.kind === 'acquired' && later(e));
      if (granted) return `node${granted.node} was granted ${job}'s lease (t${granted.token}) at ${secs(granted.t)}, but had not read its ledger with it before ${who} ${woke}: the fence holds a token from its holder's read on, so ${who}'s late write of tick ${inside.tick}${tok} met no greater token`;
      return `no successor was granted ${job}'s lease before ${who} ${woke}: its late write of tick ${inside.tick}${tok} met no greater token`;
    }
    const out = events.find((e) => e.attempt === inside.attempt && outcome.has(e.kind));
    if (!out) return `node${read.node} read ${job}'s ledger with t${read.token} at ${secs(read.t)}, but ${who} made no write after it ${woke} (its process ended first)`;
    if (out.kind === 'abandoned') return `${who}'s late write of ${job} tick ${inside.tick} was abandoned (${out.detail || 'no commit'}): nothing came to the fence`;
    if (out.t < read.t) return `${who}'s write of ${job} tick ${inside.tick} committed at ${secs(out.t)}, before node${read.node} read the ledger with t${read.token} at ${secs(read.t)}: it was not late`;
    return `node${read.node} read ${job}'s ledger with t${read.token} at ${secs(read.t)}, and ${who}'s write of tick ${inside.tick} still committed at ${secs(out.t)}`;
  });
  return why.join('; ') + '.';
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
  restream();
  window.addEventListener('resize', () => { for (const rs of app.runs.values()) if (rs.panel) schedule(rs); renderCompare(); });
  window.addEventListener('pagehide', () => { if (app.stream) app.stream.close(); });
  try {
    app.avail = await api('GET', '/api/availability');
    renderAvailability();
  } catch (e) {
    formMsg('Could not check which strategies are available: ' + e.message, true);
  }
}

main();
