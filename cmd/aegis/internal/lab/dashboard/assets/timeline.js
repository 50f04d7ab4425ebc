// The Aegis lab dashboard: one run's timeline. derive() turns a run's
// events into what the picture shows; drawLanes() draws it in SVG: a lane
// group per catalog job, in it a lane per node and the job's ledger line.
'use strict';

// What a strategy's grant is called on the timeline (info.strategies[].holds).
const holdsWords = { lease: 'lease', 'run row': 'run row', 'queue job': 'queue job', claim: 'claim' };

// derive turns a run's events into what the picture shows.
function derive(rs) {
  const jt = (job, tick) => `${job || ''}#${tick}`;
  const d = {
    attempts: [], byId: new Map(), commits: {}, missed: new Set(), dupTicks: new Set(),
    bands: [], marks: [], lines: [], grants: [], edits: [], jobs: [], lastT: 0, fired: 0, jt,
    writes: {}, // job → [{t, value, tick}] committed, in order
    why: {}, // "job#tick" → [{node, kind, detail}]: what the nodes said of the tick (errors, misfires, refusals)
    errors: [], // every node error: {node, job, tick, detail}
  };
  const jobs = new Set();
  const addJob = (j) => { if (j && !jobs.has(j)) { jobs.add(j); d.jobs.push(j); } };
  for (const j of rs.view.config.jobs || []) addJob(j.name);
  const openBand = {};
  const openGrant = {}; // "node|job" → grant
  const gk = (n, j) => `${n}|${j || ''}`;
  for (const e of rs.events) {
    // The picture ends with the last thing drawn, not with the nodes'
    // exits after the last window.
    if (e.kind !== 'finished' && e.kind !== 'exited' && e.kind !== 'started' && e.kind !== 'ready') d.lastT = Math.max(d.lastT, e.t);
    if (e.job && e.node) addJob(e.job);
    switch (e.kind) {
      case 'enter': {
        const a = { id: e.attempt, node: e.node, job: e.job, tick: e.tick, token: e.token || 0, start: e.t, end: null, outcome: 'open' };
        d.byId.set(e.attempt, a); d.attempts.push(a);
        break;
      }
      case 'entered': { const a = d.byId.get(e.attempt); if (a) a.read = e.value; break; }
      case 'writing': { const a = d.byId.get(e.attempt); if (a) a.writing = e.t; break; }
      case 'executed': {
        const a = d.byId.get(e.attempt);
        if (a) { a.end = e.t; a.outcome = 'exec'; a.value = e.value; a.seq = d.writes[e.job || ''] ? d.writes[e.job || ''].length : 0; }
        d.commits[jt(e.job, e.tick)] = (d.commits[jt(e.job, e.tick)] || 0) + 1;
        (d.writes[e.job || ''] ||= []).push({ t: e.t, value: e.value, tick: e.tick, node: e.node });
        break;
      }
      case 'stale': {
        const a = d.byId.get(e.attempt);
        if (a) { a.end = e.t; a.outcome = 'stale'; a.detail = e.detail; a.held = e.held || 0; }
        break;
      }
      case 'skipped': { const a = d.byId.get(e.attempt); if (a) a.skipped = true; break; }
      case 'abandoned': { const a = d.byId.get(e.attempt); if (a) { a.end = e.t; a.outcome = 'lost'; a.detail = e.detail; } break; }
      case 'acquired': {
        // A grant starts when the store granted it (granted), not when
        // the node said so: a node paused in between says it late.
        const k = gk(e.node, e.job);
        const start = e.granted || e.t;
        if (openGrant[k]) openGrant[k].end = Math.min(e.t, Math.max(openGrant[k].start, start));
        const g = { node: e.node, job: e.job, tick: e.tick, token: e.token || 0, start, said: e.t, end: null, until: e.until || 0, renewed: 0 };
        openGrant[k] = g; d.grants.push(g);
        break;
      }
      case 'renewed': {
        const g = openGrant[gk(e.node, e.job)];
        if (g) { g.renewed++; if (e.until) g.until = e.until; }
        break;
      }
      case 'released': case 'lost': {
        const k = gk(e.node, e.job);
        const g = openGrant[k];
        if (g) { g.end = e.t; g.lost = e.kind === 'lost'; delete openGrant[k]; }
        break;
      }
      case 'exited':
        for (const a of d.attempts) if (a.node === e.node && a.outcome === 'open') { a.end = e.t; a.outcome = 'lost'; a.detail = 'the process ended: ' + (e.detail || ''); }
        for (const [k, g] of Object.entries(openGrant)) if (g.node === e.node) { g.end = e.t; g.exited = true; delete openGrant[k]; }
        break;
      case 'tick': d.fired = Math.max(d.fired, e.tick); break;
      case 'missed': d.missed.add(jt(e.job, e.tick)); break;
      case 'error': case 'misfired': case 'refused': case 'not-primary':
        if (e.job && e.tick) (d.why[jt(e.job, e.tick)] ||= []).push({ node: e.node, kind: e.kind, detail: e.detail || '' });
        if (e.kind === 'error') d.errors.push({ node: e.node, job: e.job || '', tick: e.tick || 0, detail: e.detail || '' });
        break;
      case 'duplicate': d.dupTicks.add(jt(e.job, e.tick)); break;
      case 'chaos': {
        const detail = e.detail || '';
        const kind = detail.split(':')[0];
        if (kind === 'edit') {
          const spec = (detail.match(/^edit:[^@]*@[^=]*=([^:]+):/) || [])[1] || '';
          d.edits.push({ job: e.job, t: e.t, spec, detail });
          addJob(e.job);
        } else if ((kind === 'pause' || kind === 'partition') && e.node) {
          const b = { kind, node: e.node, start: e.t, end: null, detail };
          openBand[e.node] = b; d.bands.push(b);
        } else if (kind === 'kill' && e.node) {
          d.marks.push({ kind: 'kill', node: e.node, t: e.t, detail });
        } else if (kind === 'skew' && e.node) {
          d.marks.push({ kind: 'skew', node: e.node, t: e.t, detail, label: (detail.match(/=([+-]?[0-9.a-zµ]+)/) || [])[1] || '' });
        } else if (kind === 'failover' && e.node) {
          // The primary died right after this grant: drawn on the holder.
          d.marks.push({ kind: 'failover', node: e.node, job: e.job, t: e.t, token: e.token, detail });
          d.lines.push({ kind: 'primary lost', t: e.t, detail });
        } else {
          d.lines.push({ kind: lineLabel(kind, detail), t: e.t, detail });
        }
        break;
      }
      case 'healed':
        if (e.node && openBand[e.node]) { openBand[e.node].end = e.t; delete openBand[e.node]; }
        else if (!e.node) d.lines.push({ kind: /^postgres/.test(e.detail || '') ? 'postgres back' : /restarted after/.test(e.detail || '') ? 'member back' : 'healed', t: e.t, detail: e.detail || '' });
        break;
    }
  }
  d.attempts = d.attempts.filter((a) => !a.skipped);
  follows(d);
  harms(d, rs.view.config);
  for (const a of d.attempts) addJob(a.job);
  // Long tokens (etcd revisions, ZooKeeper zxids, run tokens) are
  // labelled by their rank among the job's tokens: r1 the smallest. The
  // tooltips keep the tokens.
  const byJob = {};
  const add = (job, t) => { if (t && t !== '0') (byJob[job || ''] ||= new Set()).add(String(t)); };
  for (const a of d.attempts) { add(a.job, a.token); add(a.job, a.held); }
  for (const g of d.grants) add(g.job, g.token);
  d.long = Object.values(byJob).some((set) => [...set].some((t) => t.length > 6));
  d.rank = {};
  for (const [job, set] of Object.entries(byJob)) {
    const sorted = [...set].sort((a, b) => cmpTok(a, b));
    d.rank[job] = new Map(sorted.map((t, i) => [t, i + 1]));
  }
  d.tl = (job, t) => {
    if (!d.long) return `t${t}`;
    const r = d.rank[job || ''] && d.rank[job || ''].get(String(t));
    return r ? `r${r}` : `t${tok(t)}`;
  };
  if (d.jobs.length === 0) d.jobs.push('');
  return d;
}

// follows finds, for each grant, the job's holder when it was granted:
// the grant of another node that had not ended then (the greatest token
// among several). A grant with a greater token is its successor (▲, in
// its own lane); one with a lesser token is a late grant, and one with the
// same token a second grant of it (a lease that does not bump its token),
// each drawn as such: never a successor.
function follows(d) {
  for (const g of d.grants) {
    let p = null;
    for (const o of d.grants) {
      if (o.job !== g.job || o.node === g.node || o.start >= g.start || (o.end !== null && o.end <= g.start)) continue;
      if (!p || cmpTok(o.token, p.token) > 0) p = o;
    }
    if (!p || !g.token || g.token === '0' || !p.token || p.token === '0') continue;
    const c = cmpTok(g.token, p.token);
    if (c > 0) g.successorOf = p;
    else if (c < 0) g.lateAfter = p;
    else g.sameAs = p;
  }
}

// harms names each commit's harm, as the checker and the store count
// them: a tick applied twice (duplicate), a write that lost an update (it
// wrote no more than the ledger held: each commit writes one more than it
// read, so it overwrote an effect it did not read), or, fenced, a token
// accepted below one already accepted (stale-accepted). Commits are taken
// in the order they were said.
function harms(d, c) {
  for (const job of Object.keys(d.writes)) {
    const execs = d.attempts.filter((a) => a.job === job && a.outcome === 'exec').sort((a, b) => a.seq - b.seq);
    let last = null; // the commit before
    let top = null; // the commit with the greatest token so far
    for (const a of execs) {
      const k = d.jt(a.job, a.tick);
      const earlier = last && (a.value ?? 0) <= (last.value ?? 0) ? last : null;
      last = a;
      const below = top && a.token && a.token !== '0' && cmpTok(a.token, top.token) < 0 ? top : null;
      const kinds = [];
      const words = [];
      if ((d.commits[k] || 0) > 1 || d.dupTicks.has(k)) { kinds.push('duplicate'); words.push(`tick ${a.tick} applied ${Math.max(2, d.commits[k] || 0)} times`); }
      if (earlier) { kinds.push('lost-update'); words.push(`wrote ${a.value} over ${earlier.value}, which node${earlier.node} (tick ${earlier.tick}${earlier.token && earlier.token !== '0' ? `, token ${earlier.token}` : ''}) had written: an update lost`); }
      if (c && c.fenced && below) { kinds.push('stale-accepted'); words.push(`token ${a.token} accepted after token ${below.token} (tick ${below.tick})`); }
      if (kinds.length) a.harm = { kind: kinds[0], kinds, words: words.join('; '), below };
      if (a.token && a.token !== '0' && (!top || cmpTok(a.token, top.token) > 0)) top = a;
    }
  }
}

// missedWhy says why a job's missed tick t ran nowhere, from what the
// nodes said of it (errors, misfires, refusals) and the grants held when
// it fired: [a short label, the words].
function missedWhy(d, job, t, tickS) {
  const said = d.why[d.jt(job, t)] || [];
  const fire = (t - 1) * tickS;
  // Its own holder that never committed it, or another tick's holder
  // whose grant was still held when it fired.
  const own = d.grants.filter((g) => g.job === job && g.tick === t);
  // A lease the node saw run out up to 50 ms before the fire time still
  // counts: its servers count its TTL from when they received the grant.
  const held = d.grants.filter((g) => g.job === job && g.tick !== t && g.start <= fire + 1e-3 && (g.end === null || g.end > fire) && (!g.until || g.until > fire - 0.05));
  const paused = (g) => d.bands.some((b) => b.node === g.node && b.kind === 'pause' && b.start <= (g.end ?? Infinity) && (b.end === null || b.end >= g.start));
  const words = said.map((w) => `node${w.node} ${w.kind === 'error' ? '' : w.kind + ': '}${w.detail}`);
  for (const g of own) words.push(`node${g.node} was granted it${g.token && g.token !== '0' ? ` (token ${g.token})` : ''} and did not commit it${paused(g) ? ': it was paused' : ''}`);
  for (const g of held) {
    const what = `node${g.node}'s ${g.token && g.token !== '0' ? `token ${g.token} ` : ''}grant (tick ${g.tick})`;
    words.push((!g.until || g.until > fire ? `${what} was still held when it fired` : `${what} ran out at ${g.until.toFixed(2)} s, as it fired (its servers count the TTL from when they received the grant)`) +
      (paused(g) ? ', its holder paused' : ''));
  }
  const all = said.map((w) => w.detail).join(' ');
  let label = '';
  if (/agreed|quorum|majority/i.test(all)) label = 'no quorum';
  else if (/no answer|timeout|timed out|deadline exceeded|i\/o timeout/i.test(all)) label = 'no answer';
  else if (own.some(paused) || held.some(paused)) label = 'paused';
  else if (own.length || held.length) label = 'held';
  else if (said.some((w) => w.kind === 'misfired')) label = 'misfire';
  else if (said.some((w) => w.kind === 'refused')) label = 'refused';
  else if (said.some((w) => w.kind === 'not-primary')) label = 'standby';
  else if (said.length) label = 'error';
  return [label, words.join('; ')];
}

// causeNotes is the run's notes of its missed ticks' causes and its
// nodes' errors, for the page under the timeline (d: derive's).
function causeNotes(d, tickS) {
  const rows = [];
  for (const k of d.missed) {
    const [job, t] = [k.slice(0, k.lastIndexOf('#')), Number(k.slice(k.lastIndexOf('#') + 1))];
    const [label, words] = missedWhy(d, job, t, tickS);
    rows.push([job, t, `${job ? job + ' ' : ''}tick ${t} missed: ${words || 'no node said why (nobody took it within its window)'}`, label]);
  }
  rows.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]));
  // The nodes' other errors (of ticks that ran in the end, or of no
  // tick), the same words once, with how many times and by whom.
  const other = new Map();
  for (const e of d.errors) {
    if (e.tick && d.missed.has(d.jt(e.job, e.tick))) continue;
    const o = other.get(e.detail) || { nodes: new Set(), n: 0 };
    o.nodes.add(e.node); o.n++;
    other.set(e.detail, o);
  }
  const errs = [...other].slice(0, 8).map(([detail, o]) => [`node${[...o.nodes].sort().join(', node')}${o.n > 1 ? ` (${o.n}×)` : ''}: ${detail}`]);
  if (other.size > 8) errs.push([`and ${other.size - 8} more kinds of node error: the JSON report has them`]);
  if (!rows.length && !errs.length) return '';
  return `<ul class="notes causes">${rows.map((r) => `<li data-job="${esc(r[0])}" data-tick="${r[1]}" data-cause="${esc(r[3])}">${esc(r[2])}</li>`).join('')}` +
    errs.map((r) => `<li class="nodeerror">${esc(r[0])}</li>`).join('') + '</ul>';
}

// lineLabel names a fault of the whole run on its line.
function lineLabel(kind, detail) {
  if (kind === 'failover') return 'replication cut';
  if (kind === 'restart') return detail.startsWith('restart:redlock') ? 'majority restart: counters lost' : 'restart: counters lost';
  if (kind === 'kill') {
    if (/killed with SIGKILL/.test(detail)) return 'member killed';
    if (/no member leads/.test(detail)) return 'no leader';
    if (/still leads/.test(detail)) return 'leader kept';
    if (/leads/.test(detail)) return 'new leader';
    return 'kill';
  }
  if (kind === 'crash') return 'postgres crash';
  if (kind === 'promote') return 'standby promoted';
  return kind;
}

// tok is a token as a label shows it: ZooKeeper's (a zxid) and etcd's
// (a revision) can be long; a label keeps the last four digits, the
// tooltip the whole.
function tok(n) {
  const t = String(n);
  return t.length > 6 ? '…' + t.slice(-4) : t;
}

// cmpTok compares two tokens (strings or numbers), exactly.
function cmpTok(a, b) {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

// refusal is a stale mark's label: the token refused against the one the
// store held ("t10 < t11"; "t4 = t4" an equal token from another holder).
function refusal(a, d) {
  const l = (t) => (d ? d.tl(a.job, t) : `t${tok(t)}`);
  if (!a.token || a.token === '0') return 'refused';
  if (!a.held || a.held === '0') return `${l(a.token)} refused`;
  const c = cmpTok(a.token, a.held);
  return `${l(a.token)} ${c < 0 ? '<' : c === 0 ? '=' : '>'} ${l(a.held)}`;
}

// zoomPx is the zoom's pixels per tick (0: fit the width).
const zoomPx = { fit: 0, '2x': 96, '4x': 192 };

// drawLanes draws the timeline of rs into its panel.
function drawLanes(rs) {
  const box = $('.lanes', rs.panel);
  const c = rs.view.config;
  const s = strategyOf(c.strategy);
  const holds = s.holds || '';
  const d = rs.derived = derive(rs);
  const st = rs.status;
  const nodes = c.nodes;
  const tickS = c.tick_s;
  const now = rs.end ? d.lastT : Math.max(d.lastT, st ? st.elapsed_s : 0);
  // A run stopped early ends its picture at its last tick fired.
  const ticks = rs.end && d.fired > 0 ? Math.min(c.ticks, d.fired) : c.ticks;
  const tEnd = Math.max(ticks * tickS, now) + tickS * 0.25;
  const tStart = -0.1 * tickS;
  const labelW = 124;
  const avail = Math.max(560, (box.clientWidth || 900) - 4);
  // At least 40 px a tick: past a dozen ticks the labels still read, and
  // the box scrolls.
  const perTick = zoomPx[rs.zoom || 'fit'] || Math.max(40, (avail - labelW - 8) / ((tEnd - tStart) / tickS));
  const plotW = Math.max(avail - labelW - 8, perTick * ((tEnd - tStart) / tickS));
  const width = labelW + plotW + 8;
  const x = (t) => labelW + ((t - tStart) / (tEnd - tStart)) * plotW;
  const axisH = 20;
  const headH = 32; // a job's header: its counts and edits, then its columns' tags
  const laneH = 46;
  const ledgerH = 40;
  const groupH = headH + nodes * laneH + ledgerH + 6;
  const jobs = d.jobs;
  // Run-wide faults (failover, restart, crash, promotion, latency): a line across and
  // a label in the foot, each label in the first row where it fits.
  const footRows = [];
  for (const l of d.lines) {
    const xl = Math.max(labelW + 1, x(l.t)); // before the first tick: at the plot's start
    const w = l.kind.length * 6 + 10;
    let row = footRows.findIndex((end) => end < xl);
    if (row < 0) { row = footRows.length; footRows.push(0); }
    footRows[row] = xl + w;
    l.row = row;
  }
  const footH = footRows.length * 13 + 6;
  const height = axisH + jobs.length * groupH + footH;
  // Two pictures side by side: the lanes' names (L) stay put while the
  // plot (out) scrolls; both share the y axis, the plot its x from labelW.
  const L = [`<svg class="names" xmlns="http://www.w3.org/2000/svg" width="${labelW}" height="${height}" viewBox="0 0 ${labelW} ${height}">`];
  const out = [];
  out.push(`<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="${width - labelW}" height="${height}" viewBox="${labelW} 0 ${width - labelW} ${height}">`);
  out.push('<defs>' +
    '<pattern id="hp" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#7a5bc7" fill-opacity="0.45"/></pattern>' +
    '<pattern id="hc" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><rect width="3" height="6" fill="#138a8a" fill-opacity="0.45"/></pattern>' +
    '</defs>');
  // The axis: tick numbers.
  for (let t = 1; t <= ticks; t++) {
    const x0 = x((t - 1) * tickS);
    const x1 = x(t * tickS);
    const fill = t <= d.fired ? '#1d2330' : '#98a2b3';
    out.push(`<text x="${(x0 + x1) / 2}" y="${axisH - 7}" text-anchor="middle" font-size="11" fill="${fill}">${t}</text>`);
  }
  const bottom = axisH + jobs.length * groupH;
  for (let t = 0; t <= ticks; t++) out.push(`<line x1="${x(t * tickS)}" y1="${axisH - 4}" x2="${x(t * tickS)}" y2="${bottom}" stroke="#e4e7ec"/>`);

  jobs.forEach((job, gi) => {
    const gy = axisH + gi * groupH;
    const spec = (c.jobs || []).find((j) => j.name === job);
    const laneY = (n) => gy + headH + (n - 1) * laneH;
    const lanesTop = gy + headH;
    const lanesH = nodes * laneH;
    // Columns of this job: grey when missed, pink when applied twice.
    for (let t = 1; t <= ticks; t++) {
      const k = d.jt(job, t);
      const n = d.commits[k] || 0;
      const missed = d.missed.has(k);
      const dup = n > 1 || d.dupTicks.has(k);
      if (!missed && !dup) continue;
      const x0 = x((t - 1) * tickS);
      const x1 = x(t * tickS);
      const [cause, causeWords] = missed ? missedWhy(d, job, t, tickS) : ['', ''];
      const why = missed ? `${job} tick ${t}: missed, nobody executed it within its window${causeWords ? ': ' + causeWords : ''}` : `${job} tick ${t}: applied ${Math.max(n, 2)} times`;
      out.push(`<rect class="col ${missed ? 'missed' : 'dupcol'}" data-job="${esc(job)}" data-tick="${t}"${missed ? ` data-cause="${esc(cause)}"` : ''} x="${x0}" y="${lanesTop}" width="${x1 - x0}" height="${lanesH}"><title>${esc(why)}</title></rect>`);
      // Above the column: its cause where it fits (the tooltip and the
      // run's notes have the nodes' words), else "missed", else the cause's
      // initials.
      const fitsTag = (text) => x1 - x0 >= text.length * 6 + 6;
      const tag = !missed ? '×' + Math.max(n, 2) : cause && fitsTag(cause) ? cause : fitsTag('missed') ? 'missed' : cause.split(' ').map((w) => w[0]).join('');
      if (tag) out.push(`<text class="${missed ? 'cause' : 'duptag'}" data-job="${esc(job)}" data-tick="${t}" x="${(x0 + x1) / 2}" y="${gy + headH - 5}" text-anchor="middle" font-size="10" font-weight="600" fill="${missed ? '#667085' : '#d62f2f'}">${esc(tag)}<title>${esc(why)}</title></text>`);
    }
    // The job's header: its name, its schedule, its edits.
    const head = job ? `${job}${spec ? ` · every ${spec.every} · work ${spec.work}${spec.keep_alive ? '' : ' · no keep-alive'}` : ' · added live'}` : 'the run';
    L.push(`<rect x="0" y="${gy + 2}" width="${labelW - 4}" height="16" fill="#eef0f3" rx="3"/>`);
    L.push(`<text class="jobhead" data-job="${esc(job)}" x="6" y="${gy + 13}" font-size="11" font-weight="700" fill="#1d2330">${esc(job || 'run')}<title>${esc(head)}</title></text>`);
    for (const ed of d.edits.filter((e) => e.job === job)) {
      const xe = Math.max(labelW + 1, x(ed.t)); // an edit before the first tick at the plot's start
      out.push(`<g class="edit" data-job="${esc(job)}"><title>${esc(ed.detail)}</title><line x1="${xe}" y1="${gy + 2}" x2="${xe}" y2="${lanesTop + lanesH}" stroke="#2563eb" stroke-width="2" stroke-dasharray="2 2"/>` +
        `<rect x="${xe + 2}" y="${gy + 17}" width="${ed.spec.length * 6 + 24}" height="13" rx="3" fill="#dbe7fb"/><text x="${xe + 5}" y="${gy + 27}" font-size="9.5" fill="#1d4ed8">edit ${esc(ed.spec)}</text></g>`);
    }
    // Each lane's foot holds short labels (expiry, successor, faults): a
    // label that would overprint one of higher priority is left to the
    // tooltip.
    const feet = [];
    const foot = (node, xf, text, color, prio) => feet.push({ node, x: xf, text, color, prio });
    // Lanes.
    for (let n = 1; n <= nodes; n++) {
      const y = laneY(n);
      const ns = st && st.nodes ? st.nodes.find((q) => q.node === n) : null;
      const holder = !rs.end && st && st.holder === n && (!st.job || st.job === job);
      if (holder) { out.push(`<rect x="${labelW}" y="${y}" width="${width}" height="${laneH}" fill="#eef4fd"/>`); L.push(`<rect x="0" y="${y}" width="${labelW}" height="${laneH}" fill="#eef4fd"/>`); }
      out.push(`<line x1="${labelW}" y1="${y + laneH}" x2="${width}" y2="${y + laneH}" stroke="#eef0f3"/>`);
      const stateText = ns && ns.state !== 'running' ? ns.state : '';
      const standby = c.standby && n > nodes - c.standby ? 'standby' : '';
      L.push(`<text x="6" y="${y + 15}" font-size="12.5" font-weight="${holder ? 700 : 500}" fill="#1d2330">node${n}${holder ? ' ★' : ''}</text>`);
      const sub = [stateText, standby, holder && st.token && st.token !== '0' ? `token ${d.tl(job, st.token)}` : '', ns && ns.incarnation > 1 ? `#${ns.incarnation}` : ''].filter(Boolean).join(' · ');
      if (sub) L.push(`<text x="6" y="${y + 29}" font-size="10.5" fill="${stateText === 'paused' ? '#7a5bc7' : '#667085'}">${esc(sub)}</text>`);
    }
    // Grants: a line under the marks from the store's grant to the end of
    // the node's tick; past its expiry on the server the line is dashed.
    // A successor's grant (a greater token while another node still ran
    // the job) is a ▲ in its own lane; a late grant (a lesser token) is
    // drawn as that.
    if (holdsWords[holds]) {
      for (const g of d.grants.filter((q) => q.job === job)) {
        const y = laneY(g.node) + 21;
        const x0 = x(g.start);
        const gEnd = g.end ?? now;
        const expired = g.until > 0 && g.until < gEnd - 1e-3;
        const xExp = expired ? x(g.until) : x(gEnd);
        const tl = g.token ? d.tl(job, g.token) : '';
        const data = `data-node="${g.node}" data-job="${esc(job)}" data-tick="${g.tick}" data-token="${g.token}"`;
        const what = `node${g.node} holds ${job ? job + "'s " : ''}${holds}${g.token ? ` with token ${g.token}` : ''}, granted at ${g.start.toFixed(2)} s` +
          (g.said - g.start > 0.05 ? ` (the node said so at ${g.said.toFixed(2)} s: it was paused in between)` : '');
        out.push(`<line class="lease" data-kind="grant" ${data} data-t="${g.start}" x1="${x0}" y1="${y}" x2="${Math.max(x0 + 1, xExp)}" y2="${y}" stroke="#8fb4ea" stroke-width="2"><title>${esc(what)}${g.renewed ? ` (renewed ${g.renewed}×)` : ''}</title></line>`);
        if (expired) {
          out.push(`<line class="lease after" x1="${xExp}" y1="${y}" x2="${Math.max(xExp + 1, x(gEnd))}" y2="${y}" stroke="#d97706" stroke-width="1.5" stroke-dasharray="3 2"><title>${esc(`node${g.node} still works, but its ${holds} expired on the server at ${g.until.toFixed(2)} s`)}</title></line>`);
          out.push(`<g class="expiry" data-kind="expiry" ${data} data-t="${g.until}"><title>${esc(`node${g.node}'s ${holds}${g.token ? ` (token ${g.token})` : ''} expired on the server at ${g.until.toFixed(2)} s: not renewed since (paused, cut off or no keep-alive)`)}</title>` +
            `<line x1="${xExp}" y1="${y - 5}" x2="${xExp}" y2="${y + 5}" stroke="#d97706" stroke-width="2.5"/></g>`);
          foot(g.node, xExp, 'expired', '#b45309', 0);
        }
        const p = g.successorOf || g.lateAfter || g.sameAs;
        if (!p) continue;
        const pl = d.tl(job, p.token);
        if (g.successorOf) {
          out.push(`<g class="successor" data-kind="successor" ${data} data-prev="${p.token}" data-t="${g.start}"><title>${esc(`node${g.node} was granted ${job || 'the job'} with token ${g.token} at ${g.start.toFixed(2)} s while node${p.node} (token ${p.token}) still ran its tick`)}</title>` +
            `<path d="M${x0 - 4},${y + 6} L${x0 + 4},${y + 6} L${x0},${y - 1} Z" fill="#2563eb"/></g>`);
          foot(g.node, x0 - 3, `▲ ${tl} > ${pl}`, '#1d4ed8', 1);
        } else {
          const late = !!g.lateAfter;
          out.push(`<g class="lategrant" data-kind="${late ? 'late-grant' : 'same-token'}" ${data} data-prev="${p.token}" data-t="${g.start}"><title>${esc(`node${g.node} was granted token ${g.token} at ${g.start.toFixed(2)} s, ` +
            (late ? `lower than node${p.node}'s token ${p.token} held then: a late grant, not a successor` : `the token node${p.node} held then: one token granted twice, not a successor`))}</title>` +
            `<path d="M${x0 - 4},${y - 1} L${x0 + 4},${y - 1} L${x0},${y + 6} Z" fill="#fff" stroke="#b45309" stroke-width="1.3"/></g>`);
          foot(g.node, x0 - 3, late ? `late ${tl} < ${pl}` : `again ${tl} = ${pl}`, '#b45309', 1);
        }
      }
    }
    // Critical sections, each labelled with its token below; a refusal
    // reads "t10 < t11".
    const labelEnd = {}; // node → the x where its last label ends
    const attempts = d.attempts.filter((a) => a.job === job).sort((a, b) => a.start - b.start);
    for (const a of attempts) {
      const y = laneY(a.node) + 3;
      const x0 = x(a.start);
      const x1 = Math.max(x0 + 3, x(a.end ?? now));
      // A harm is red (a tick applied twice, an update lost, a stale token
      // accepted); green only for a commit of a tick applied once.
      let cls = a.outcome;
      if (cls === 'exec' && a.harm) cls = 'dup';
      const kind = { exec: 'write', dup: 'harm', stale: 'refused' }[cls] || 'section';
      const what = { exec: 'committed, applied once', dup: `committed: harm, ${a.harm ? a.harm.words : ''}`, stale: `refused by the fence: token ${a.token} against ${a.held || 'unknown'} held by the store`, open: 'in the critical section', lost: 'ended without a commit' }[cls];
      const title = `node${a.node}, ${a.job ? a.job + ' ' : ''}tick ${a.tick}${a.token ? `, token ${a.token}` : ''}: ${what}` +
        (a.read !== undefined && a.read !== null ? `; read ${a.read}` : '') + (a.value !== undefined ? `, wrote ${a.value}` : '') + (a.detail ? ` (${a.detail})` : '');
      out.push(`<rect class="mark ${cls}" data-kind="${kind}"${a.harm ? ` data-harm="${a.harm.kinds.join(' ')}"` : ''} data-job="${esc(a.job || '')}" data-tick="${a.tick}" data-node="${a.node}" data-token="${a.token}" data-t="${a.start}" x="${x0}" y="${y}" width="${x1 - x0}" height="15" rx="2"><title>${esc(title)}</title></rect>`);
      // The tick inside the mark: "#12", "12" when that is too wide, else
      // with the label under it.
      const fits = (text) => x1 - x0 > text.length * 5.6 + 4;
      const inside = fits(`#${a.tick}`) ? `#${a.tick}` : fits(`${a.tick}`) ? `${a.tick}` : '';
      if (inside) out.push(`<text class="tick" x="${x0 + (inside[0] === '#' ? 3 : 1.5)}" y="${y + 11}" font-size="9.5" fill="${cls === 'open' ? '#3b7dd8' : '#fff'}" pointer-events="none">${esc(inside)}</text>`);
      // The token under the mark; a refusal at the mark's end, where the
      // store refused it, with a line to the commit that holds the token
      // it lost to. A label that would overprint the lane's last one is
      // left to the tooltip.
      const stale = cls === 'stale';
      const tokLabel = a.token && a.token !== '0' ? d.tl(a.job, a.token) : '';
      const harmLabel = a.harm ? ({ duplicate: `×${Math.max(2, d.commits[d.jt(a.job, a.tick)] || 0)}`, 'lost-update': 'lost', 'stale-accepted': 'stale' }[a.harm.kind] +
        (a.harm.below ? ` ${tokLabel} < ${d.tl(a.job, a.harm.below.token)}` : tokLabel ? ' ' + tokLabel : '')) : '';
      // A mark too narrow for its tick has it in its label (a refusal's
      // is in its tooltip).
      const label = stale ? refusal(a, d) : (inside ? '' : `#${a.tick} `) + (harmLabel || tokLabel);
      if (stale && a.held) {
        const won = attempts.filter((b) => b.outcome === 'exec' && String(b.token) === String(a.held) && b.end !== null && b.end <= (a.end ?? now)).pop();
        if (won) out.push(`<line class="lostto" x1="${x1}" y1="${y + 8}" x2="${x(won.end)}" y2="${laneY(won.node) + 11}" stroke="#d97706" stroke-width="1" stroke-dasharray="2 2"><title>${esc(`refused: node${won.node} had committed token ${won.token} (tick ${won.tick})`)}</title></line>`);
      }
      if (!label) continue;
      const w = label.length * 5.4 + 4;
      const lx = stale ? x1 + 2 : x0;
      if ((labelEnd[a.node] || 0) > lx) continue;
      labelEnd[a.node] = lx + w;
      out.push(`<text class="${stale ? 'refusal' : a.harm ? 'harmlabel' : 'token'}" data-node="${a.node}" data-tick="${a.tick}" x="${lx}" y="${y + 29}" font-size="9.5" font-weight="${stale || a.harm ? 700 : 400}" fill="${stale ? '#b45309' : a.harm ? '#a32020' : '#475467'}">${esc(label)}</text>`);
    }
    // Faults on a node, over the marks: bands (pause, partition) and
    // marks (kill, skew, the grant a failover lost), in the lane's foot.
    for (const b of d.bands) {
      const y = laneY(b.node);
      const x0 = Math.max(labelW + 1, x(b.start));
      const x1 = x(b.end ?? now);
      const secs = b.end !== null ? ` ${(b.end - b.start).toFixed(1)} s` : '';
      out.push(`<rect class="band ${b.kind}" data-node="${b.node}" x="${x0}" y="${y + 1}" width="${Math.max(2, x1 - x0)}" height="${laneH - 2}" fill="url(#${b.kind === 'pause' ? 'hp' : 'hc'})" stroke="${b.kind === 'pause' ? '#7a5bc7' : '#138a8a'}" stroke-width="1"><title>${esc(b.detail)}</title></rect>`);
      foot(b.node, x0 + 3, `${b.kind === 'pause' ? 'paused' : 'cut'}${secs}`, b.kind === 'pause' ? '#5b3fa8' : '#0e6a6a', 5);
    }
    for (const m of d.marks) {
      if (m.kind === 'failover' && m.job && m.job !== job) continue;
      const y = laneY(m.node);
      const xm = Math.max(labelW + 6, x(m.t)); // a skew set before the first tick: at the plot's start
      const yf = y + laneH - 7; // in the lane's foot, beside its label
      if (m.kind === 'kill') {
        out.push(`<g class="kill"><title>${esc(m.detail)}</title><line x1="${xm - 4}" y1="${yf - 4}" x2="${xm + 4}" y2="${yf + 4}" stroke="#1d2330" stroke-width="2"/><line x1="${xm + 4}" y1="${yf - 4}" x2="${xm - 4}" y2="${yf + 4}" stroke="#1d2330" stroke-width="2"/></g>`);
        foot(m.node, xm + 6, 'killed', '#1d2330', 2);
      } else if (m.kind === 'skew') {
        out.push(`<g class="skew"><title>${esc(m.detail)} (its clock is set off real time from here on; not a step of the lab's clock)</title><circle cx="${xm}" cy="${yf}" r="4.5" fill="#fff" stroke="#b25d00" stroke-width="1.3"/><line x1="${xm}" y1="${yf}" x2="${xm}" y2="${yf - 3}" stroke="#b25d00" stroke-width="1.2"/><line x1="${xm}" y1="${yf}" x2="${xm + 2.5}" y2="${yf}" stroke="#b25d00" stroke-width="1.2"/>` +
          '</g>');
        foot(m.node, xm + 7, `clock ${m.label}`, '#b25d00', 4);
      } else if (m.kind === 'failover') {
        out.push(`<g class="failovermark"><title>${esc(m.detail)}</title><rect x="${xm - 4}" y="${yf - 4}" width="8" height="8" fill="#c2410c" transform="rotate(45 ${xm} ${yf})"/>` +
          '</g>');
        foot(m.node, xm + 7, `grant${m.token ? ' ' + d.tl(m.job, m.token) : ''} lost`, '#c2410c', 3);
      }
    }
    const placed = {};
    for (const f of feet.sort((a, b) => a.prio - b.prio)) {
      const w = f.text.length * 5.2 + 4;
      const taken = placed[f.node] ||= [];
      if (taken.some(([a, b]) => f.x < b && f.x + w > a)) continue;
      taken.push([f.x, f.x + w]);
      out.push(`<text class="foot" data-node="${f.node}" x="${f.x}" y="${laneY(f.node) + laneH - 3}" font-size="9" font-weight="600" fill="${f.color}">${esc(f.text)}</text>`);
    }
    drawLedger(out, L, d, job, gy + headH + lanesH + 2, ledgerH, x, labelW, now);
  });
  // Faults of the whole run (failover, restart, crash, promotion, latency).
  for (const l of d.lines) {
    const xl = Math.max(labelW + 1, x(l.t)); // before the first tick: at the plot's start
    out.push(`<g class="labline"><title>${esc(l.detail)}</title><line x1="${xl}" y1="${axisH - 2}" x2="${xl}" y2="${bottom}" stroke="#c2410c" stroke-width="1.5" stroke-dasharray="4 3"/>` +
      `<text x="${xl + 3}" y="${bottom + 11 + l.row * 13}" font-size="10" fill="#c2410c">${esc(l.kind)}</text></g>`);
  }
  if (!rs.end && now > 0) out.push(`<line x1="${x(now)}" y1="${axisH - 4}" x2="${x(now)}" y2="${bottom}" stroke="#3b7dd8" stroke-opacity="0.5"/>`);
  out.push('</svg>');
  L.push('</svg>');
  // While the run goes, the plot follows the now line unless the user
  // scrolled away from it.
  const old = $('.plotbox', box);
  const nowX = x(now) - labelW;
  const left = old ? old.scrollLeft : 0;
  const follow = !old || (rs.lastNowX !== undefined && rs.lastNowX >= left - 2 && rs.lastNowX <= left + old.clientWidth + 2);
  box.innerHTML = L.join('') + `<div class="plotbox">${out.join('')}</div>`;
  const pb = $('.plotbox', box);
  // A finished run opens at its start (once: then where the user puts it).
  if (rs.end && !rs.openedAtStart) { rs.openedAtStart = true; pb.scrollLeft = 0; }
  else pb.scrollLeft = follow && !rs.end && nowX > pb.clientWidth - 60 ? nowX - pb.clientWidth + 60 : left;
  rs.lastNowX = nowX;
}

// drawLedger draws a job's ledger: the value each commit wrote (dots and
// a step line) against the commits applied so far (the dashed line). A
// lost update is where the value falls below the commits.
function drawLedger(out, L, d, job, y0, h, x, labelW, now) {
  const writes = (d.writes[job] || []).slice().sort((a, b) => a.t - b.t);
  const top = y0 + 4;
  const bot = y0 + h - 6;
  const maxV = Math.max(1, writes.length, ...writes.map((w) => w.value || 0));
  const yv = (v) => bot - (v / maxV) * (bot - top);
  const last = writes.length ? writes[writes.length - 1] : null;
  const lost = last ? writes.length - Math.max(...writes.map((w) => w.value || 0)) : 0;
  L.push(`<text x="6" y="${y0 + 14}" font-size="10.5" font-weight="600" fill="#1d2330">ledger</text>`);
  L.push(`<text class="ledgersum" data-job="${esc(job)}" x="6" y="${y0 + 27}" font-size="9.5" fill="${lost > 0 ? '#a32020' : '#667085'}">${last ? `${Math.max(...writes.map((w) => w.value || 0))} for ${writes.length} commits` : 'no commit yet'}</text>`);
  out.push(`<line x1="${labelW}" y1="${bot}" x2="${x(now)}" y2="${bot}" stroke="#e4e7ec"/>`);
  if (!writes.length) return;
  // Commits so far: a dashed step line.
  let p = `M${x(writes[0].t)},${yv(0)}`;
  writes.forEach((w, i) => { p += ` H${x(w.t)} V${yv(i + 1)}`; });
  p += ` H${x(now)}`;
  out.push(`<path class="commits" d="${p}" fill="none" stroke="#98a2b3" stroke-width="1.2" stroke-dasharray="3 2"><title>commits applied to ${esc(job)}: ${writes.length}</title></path>`);
  // The ledger: the value the store holds after each commit.
  let v = 0;
  let q = `M${x(writes[0].t)},${yv(0)}`;
  for (const w of writes) { v = Math.max(v, w.value || 0); q += ` H${x(w.t)} V${yv(w.value || 0)}`; }
  q += ` H${x(now)}`;
  out.push(`<path class="ledger" d="${q}" fill="none" stroke="#2563eb" stroke-width="1.6"><title>${esc(job)}'s ledger: the value written by each commit</title></path>`);
  let seen = new Set();
  writes.forEach((w, i) => {
    const again = seen.has(w.value);
    seen.add(w.value);
    const lostHere = (w.value || 0) < i + 1;
    out.push(`<circle class="write${again ? ' lost' : ''}" cx="${x(w.t)}" cy="${yv(w.value || 0)}" r="${again ? 3.5 : 2.2}" fill="${again ? '#a32020' : lostHere ? '#d97706' : '#2563eb'}">` +
      `<title>${esc(`node${w.node} wrote ${w.value} (tick ${w.tick}), commit ${i + 1}${again ? `: ${w.value} was already written, an update lost` : ''}`)}</title></circle>`);
  });
}

// jobsTable is the report's counts per job, as a table.
function jobsTable(r) {
  if (!r || !r.jobs || !r.jobs.length) return '';
  const cols = [['ticks', 'ticks'], ['executions', 'executions'], ['duplicates_applied', 'applied twice'], ['stale_rejected', 'refused'], ['missed_ticks', 'missed'], ['lost_updates', 'lost updates']];
  return `<table class="jobstable"><thead><tr><th>job</th>${cols.map(([, l]) => `<th>${l}</th>`).join('')}<th>checker</th></tr></thead><tbody>` +
    r.jobs.map((j) => `<tr data-job="${esc(j.name)}"><td>${esc(j.name)}</td>${cols.map(([k]) => `<td class="n${(k === 'duplicates_applied' || k === 'lost_updates') && j[k] ? ' bad' : ''}">${j[k] ?? 0}</td>`).join('')}` +
      `<td class="ck ${esc(j.checker)}">${esc(j.checker)}</td></tr>`).join('') + '</tbody></table>';
}
