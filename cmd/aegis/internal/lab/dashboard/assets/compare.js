// The Aegis lab dashboard: the comparison of a group's runs, as bars and a
// table. Bars are scaled to the group's ticks, so that one duplicate of
// twenty ticks is a twentieth of the width.
'use strict';

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

// countsOf is a run's counts for the comparison: its report's, or, while
// it runs, its status's so far (live: true).
function countsOf(r) {
  const rs = r.id ? app.runs.get(r.id) : null;
  const rep = r.report || (rs && rs.end && rs.end.report);
  if (rep) return { ...rep, live: false };
  if (rs && rs.status) return { ...rs.status, lost_updates: 0, ticks: '≈' + jobTicks(r.config), checker: 'running', live: true };
  return null;
}

// scheduleCompare redraws the comparison at most twice a second (statuses
// come ten times a second per run).
function scheduleCompare() {
  if (app.compareQueued) return;
  app.compareQueued = true;
  setTimeout(() => { app.compareQueued = false; renderCompare(); }, 500);
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
  // The scale: the most ticks of a run of the group (or a count above it).
  let maxV = 1;
  for (const r of g.runs) {
    maxV = Math.max(maxV, jobTicks(r.config));
    const k = countsOf(r);
    if (k) for (const m of metrics) maxV = Math.max(maxV, k[m.key] || 0);
  }
  const labelW = 170;
  const verdictW = 96;
  const width = Math.max(560, chart.clientWidth || 900);
  const barW = width - labelW - verdictW - 40;
  const barH = 5;
  const rowH = metrics.length * (barH + 1) + 8;
  const legendH = 22;
  const height = legendH + g.runs.length * rowH + 18;
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
    const k = countsOf(r);
    if (!k) {
      const why = r.state === 'unavailable' ? 'unavailable: ' + r.unavailable : r.state === 'failed' ? 'failed: ' + r.error : r.state;
      out.push(`<text x="${labelW}" y="${y + rowH / 2 + 4}" font-size="11.5" fill="#667085">${esc(why.length > 110 ? why.slice(0, 110) + '…' : why)}<title>${esc(why)}</title></text>`);
      return;
    }
    metrics.forEach((m, j) => {
      const v = k[m.key] || 0;
      const w = (v / maxV) * barW;
      const yb = y + 4 + j * (barH + 1);
      if (v > 0) out.push(`<rect class="bar" data-metric="${m.key}" x="${labelW}" y="${yb}" width="${Math.max(2, w)}" height="${barH}" fill="${m.color}"${k.live ? ' fill-opacity="0.5"' : ''}><title>${m.label}: ${v}${k.live ? ' so far' : ''}</title></rect>`);
      if (v > 0) out.push(`<text x="${labelW + Math.max(2, w) + 4}" y="${yb + barH}" font-size="8.5" fill="#475467">${v}</text>`);
    });
    const ck = k.checker;
    out.push(`<rect x="${width - verdictW}" y="${y + rowH / 2 - 9}" width="${verdictW - 8}" height="18" rx="9" fill="${ck === 'ok' ? '#e3f4ea' : ck === 'violation' ? '#fde8e8' : '#eef0f3'}"/>` +
      `<text x="${width - verdictW / 2 - 4}" y="${y + rowH / 2 + 4}" text-anchor="middle" font-size="11.5" fill="${ck === 'ok' ? '#1f6e40' : ck === 'violation' ? '#a32020' : '#667085'}">${esc(ck)}</text>`);
  });
  out.push(`<text x="${labelW}" y="${height - 4}" font-size="10" fill="#667085">scale: the full width is ${maxV}, the most job ticks of a run here (each job's fire times, summed)</text>`);
  out.push('</svg>');
  chart.innerHTML = out.join('');

  const cols = ['ticks', 'executions', 'duplicate_ticks', 'duplicates_applied', 'stale_rejected', 'missed_ticks', 'lost_updates'];
  table.innerHTML = `<table class="comparetable"><thead><tr><th>strategy</th><th>fenced</th>${cols.map((k) => `<th>${k.replace('_', ' ')}</th>`).join('')}<th>checker</th></tr></thead><tbody>` +
    g.runs.map((r) => {
      const c = r.config;
      const k = countsOf(r);
      if (!k) return `<tr><td>${esc(c.strategy)}</td><td>${fencedWord(c)}</td><td colspan="${cols.length + 1}">${esc(r.state === 'unavailable' ? 'unavailable: ' + r.unavailable : r.state)}</td></tr>`;
      return `<tr><td>${esc(c.strategy)}</td><td>${fencedWord(c)}</td>${cols.map((col) => `<td class="n${(col === 'duplicates_applied' || col === 'lost_updates') && k[col] ? ' bad' : ''}">${k.live && col === 'lost_updates' ? '–' : k[col] ?? 0}</td>`).join('')}` +
        `<td>${k.visualisation ? `<a href="${esc(k.visualisation)}" target="_blank" rel="noopener">${esc(k.checker)}</a>` : esc(k.checker + (k.live ? ' (so far)' : ''))}</td></tr>`;
    }).join('') + '</tbody></table>';
}

