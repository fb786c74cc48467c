// The live page of a batch: follows GET <batch>/live/events (a snapshot, then deltas) and
// draws it; sends the controls as POSTs with the page's token. Served by the coordinator
// itself (the page's policy allows scripts from its origin only). Every value from the
// server is written with textContent, never as markup.
'use strict';
(function () {
  const params = new URLSearchParams(location.search);
  const token = params.get('token') || '';
  const base = location.pathname.replace(/\/live\.html$/, '');
  const tokenQuery = token ? 'token=' + encodeURIComponent(token) : '';
  const withToken = (path) => path + (tokenQuery ? (path.includes('?') ? '&' : '?') + tokenQuery : '');
  let snap = null;
  let source = null;
  let stripUnit = null;
  let confirmAction = null;

  const $ = (id) => document.getElementById(id);
  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function usd(value) { return value === undefined || value === null ? '–' : '$' + Number(value).toFixed(2); }
  function duration(seconds) {
    if (seconds === undefined || seconds === null) return '–';
    if (seconds < 90) return seconds + ' s';
    if (seconds < 5400) return Math.round(seconds / 60) + ' min';
    return (seconds / 3600).toFixed(1) + ' h';
  }
  function setText(id, value) { const node = $(id); if (node) node.textContent = String(value); }

  function follow() {
    source = new EventSource(withToken(base + '/live/events'));
    source.addEventListener('snapshot', (event) => { snap = JSON.parse(event.data); render(true); });
    source.addEventListener('delta', (event) => { applyDelta(JSON.parse(event.data)); });
    source.onopen = () => setText('link', 'live');
    source.onerror = () => {
      if (snap && snap.verdict) { source.close(); setText('link', 'ended'); return; }
      setText('link', 'reconnecting…');
    };
  }

  function applyDelta(delta) {
    if (!snap) return;
    for (const key of Object.keys(delta)) {
      if (key === 'cells') {
        for (const [index, cell] of delta.cells) snap.cells[index] = cell;
      } else {
        snap[key] = delta[key];
      }
    }
    render(false);
  }

  function render(whole) {
    document.body.dataset.state = snap.state;
    setText('state', snap.state);
    $('simulated').hidden = !snap.simulated;
    const p = snap.progress;
    for (const key of ['planned', 'queued', 'running', 'finished', 'passed', 'failed', 'errored', 'infraFailed', 'discarded', 'skipped']) {
      setText('p-' + key, p[key] || 0);
    }
    const done = p.planned ? Math.min(100, (100 * (p.finished + p.skipped)) / p.planned) : 0;
    $('bar-done').style.width = done.toFixed(1) + '%';
    setText('rate', p.perMinute === undefined ? '–' : Number(p.perMinute).toFixed(p.perMinute < 10 ? 1 : 0) + ' runs/min');
    setText('eta', snap.verdict ? '–' : duration(p.etaS));
    renderCost(snap.cost);
    renderWords();
    renderWorkers();
    renderHeatmap(whole);
    renderFailures();
    renderChanges();
    renderVerdict();
    renderControls();
  }

  function renderCost(cost) {
    // A simulated batch spends nothing: its figures are the simulator's prices, said so
    // beside each one (the banner above says no money was spent).
    const priced = (value) => (snap.simulated && usd(value) !== '–' ? usd(value) + ' (simulated)' : usd(value));
    setText('c-spent', priced(cost.spentUsd));
    setText('c-max', usd(cost.maxBudgetUsd));
    setText('c-batch', usd(cost.batchBudgetUsd));
    setText('c-per-run', priced(cost.perRunUsd));
    setText('c-projected', priced(cost.projectedUsd));
    const cap = cost.batchBudgetUsd;
    const bar = $('bar-cost');
    if (cap) {
      bar.style.width = Math.min(100, (100 * cost.spentUsd) / cap).toFixed(1) + '%';
      const over = cost.projectedUsd !== undefined && cost.projectedUsd > cap;
      setText('c-words', over ? 'at this rate the batch budget runs out before the batch ends' : 'within the batch budget at this rate');
    } else {
      bar.style.width = '0%';
      setText('c-words', 'no batch budget');
    }
  }

  function renderWords() {
    const list = $('words');
    clear(list);
    const words = [];
    const d = snap.dispatch;
    if (d.paused) words.push('Dispatch is paused: no new job of this batch starts on any worker; running jobs finish and count.');
    // A wait for the fair share is said on the share's own line below.
    const shareWait = d.heldBy && d.heldBy.startsWith('fair share') && (d.shares || []).length;
    if (d.heldBy && !d.paused && !shareWait) words.push('Admission waits: ' + d.heldBy + '.');
    for (const tier of d.pausedTiers || []) words.push('Tier ' + tier + ' is paused after a usage limit.');
    for (const share of snap.verdict ? [] : d.shares || []) {
      const others = share.batches - 1;
      words.push('Priority ' + share.priority + ': ' + share.running + ' running and ' + share.queued + ' queued of the ' + share.slots + ' live slots of tier ' + share.tier
        + (others > 0 ? ', shared with ' + others + (others === 1 ? ' other batch' : ' other batches') + ' (its share now: ' + share.allowed + ')' : '')
        + (share.waitsFor ? '; waits: ' + share.waitsFor : '') + '.');
    }
    if (snap.stall) words.push('Stalled: ' + snap.stall.message + ' (no job started or finished for ' + Math.round((Date.now() - snap.stall.progressAtMs) / 1000) + 's)' + (snap.stall.cancelled ? '; cancelled by --on-stall cancel.' : '.'));
    for (const tier of snap.unservedTiers || []) words.push('No live worker serves tier ' + tier.tier + ': ' + tier.waiting + ' job(s) waiting.');
    for (const stall of snap.fabricStalls || []) words.push(stall.kind + ' ' + stall.name + ' ' + stall.reason + '.');
    words.push('At most ' + d.maxRunning + (d.maxRunning === 1 ? ' job' : ' jobs') + ' of this batch run at once.');
    for (const text of words) list.appendChild(el('li', text));
  }

  function renderWorkers() {
    const body = $('workers');
    clear(body);
    if (!(snap.workers || []).length) {
      const row = el('tr');
      const cell = el('td', snap.verdict ? 'the batch has ended' : 'no live worker serves this batch\'s tiers', 'muted');
      cell.colSpan = 3;
      row.appendChild(cell);
      body.appendChild(row);
      return;
    }
    for (const worker of snap.workers) {
      const row = el('tr');
      row.appendChild(el('td', worker.workerId + (worker.draining ? ' (draining)' : '')));
      row.appendChild(el('td', worker.tiers.join(', ')));
      row.appendChild(el('td', worker.busy + ' / ' + worker.slots, 'num'));
      body.appendChild(row);
    }
  }

  // A cell's colour follows its verdict: green when its pass rate reaches the batch's
  // --min-pass-rate (all runs when the view does not say), red below; the further from the
  // bar, the deeper the colour.
  function heat(cell) {
    if (!cell.finished) return '';
    const rate = cell.passed / cell.finished;
    const bar = typeof snap.minPassRate === 'number' ? snap.minPassRate : 1;
    if (rate >= bar) return 'hsl(137,50%,' + Math.round(90 - 16 * rate) + '%)';
    return 'hsl(356,78%,' + Math.round(72 + 18 * (bar ? rate / bar : 0)) + '%)';
  }

  function heatTable(box, rows, cols) {
    const table = el('table');
    const head = el('tr');
    head.appendChild(el('th', ''));
    const plain = cols.length === 1;
    if (!plain) for (const col of cols) head.appendChild(el('th', col, 'col'));
    else head.appendChild(el('th', snap.unitsPerCell > 1 ? snap.unitsPerCell + ' units per cell' : 'runs', 'col'));
    table.appendChild(head);
    for (const [name, indexes] of rows) {
      const row = el('tr');
      row.appendChild(el('th', name, 'row'));
      const byCol = new Map(indexes.map((index) => [snap.cells[index].col, index]));
      for (const col of plain ? [cols[0]] : cols) {
        const td = el('td', '', 'cell');
        if (byCol.has(col)) wireCell(td, byCol.get(col));
        row.appendChild(td);
      }
      table.appendChild(row);
    }
    box.appendChild(table);
  }

  function heatGrid(box, rows, nCols) {
    box.appendChild(el('p', nCols + ' columns are too many for a table: each square is one cell, in order; hover or focus a cell for its name, click it for its runs.', 'muted'));
    for (const [name, indexes] of rows) {
      box.appendChild(el('h3', name + ' · ' + indexes.length + (indexes.length === 1 ? ' cell' : ' cells'), 'row'));
      const grid = el('div', null, 'heat-grid');
      for (const index of indexes) {
        const node = el('span', '', 'cell');
        node.setAttribute('role', 'button');
        wireCell(node, index);
        grid.appendChild(node);
      }
      box.appendChild(grid);
    }
  }

  // Past this many columns a table of the cells would run far off the page sideways: each
  // row's cells wrap as a grid instead, named in their tooltips.
  const TABLE_COLS_MAX = 12;

  function wireCell(node, index) {
    node.id = 'cell-' + index;
    node.tabIndex = 0;
    node.addEventListener('click', () => loadStrip(snap.cells[index].unit));
    node.addEventListener('keydown', (event) => { if (event.key === 'Enter') loadStrip(snap.cells[index].unit); });
  }

  function renderHeatmap(whole) {
    const box = $('heatmap');
    if (whole || box.dataset.cells !== String(snap.cells.length)) {
      clear(box);
      box.dataset.cells = String(snap.cells.length);
      const cols = [];
      const rows = new Map();
      snap.cells.forEach((cell, index) => {
        if (!cols.includes(cell.col)) cols.push(cell.col);
        if (!rows.has(cell.row)) rows.set(cell.row, []);
        rows.get(cell.row).push(index);
      });
      if (cols.length > TABLE_COLS_MAX) heatGrid(box, rows, cols.length);
      else heatTable(box, rows, cols);
    }
    snap.cells.forEach((cell, index) => {
      const td = $('cell-' + index);
      if (!td) return;
      td.dataset.finished = String(cell.finished);
      td.dataset.passed = String(cell.passed);
      td.textContent = cell.finished ? cell.passed + '/' + cell.finished : '·';
      td.title = cell.row + ' ' + cell.col + ': ' + cell.passed + ' passed, ' + cell.failed + ' failed, ' + cell.errored + ' errored of ' + cell.runs;
      td.style.backgroundColor = heat(cell);
    });
    if (stripUnit !== null && !snap.verdict) loadStrip(stripUnit, true);
  }

  let stripLoading = false;
  function loadStrip(unit, quiet) {
    if (stripLoading) return;
    stripUnit = unit;
    stripLoading = true;
    fetch(base + '/live/units/' + unit, { headers: { Authorization: 'Bearer ' + token } })
      .then((response) => response.ok ? response.json() : response.json().then((body) => { throw new Error(body.error); }))
      .then(renderStrip)
      .catch((error) => { if (!quiet) setText('strip-title', String(error.message || error)); })
      .finally(() => { stripLoading = false; });
  }

  function renderStrip(strip) {
    setText('strip-title', 'Runs of ' + strip.label);
    const box = $('strip');
    clear(box);
    for (const run of strip.runs) {
      const node = run.result ? el('a', String(run.run), 'run ' + run.state) : el('span', String(run.run), 'run ' + run.state);
      if (run.result) node.href = withToken(base + '/artifacts/' + run.result);
      node.title = 'run ' + run.run + ': ' + run.state;
      box.appendChild(node);
    }
  }

  function renderFailures() {
    const list = $('failures');
    clear(list);
    if (!snap.failures.length) { list.appendChild(el('li', 'none yet', 'muted')); return; }
    for (const failure of snap.failures) {
      const item = el('li');
      item.appendChild(el('strong', failure.kind + ' '));
      item.appendChild(el('span', failure.scenario + (failure.cell !== failure.scenario ? ' · ' + failure.cell : '') + ': '));
      item.appendChild(el('span', failure.reason, 'reason'));
      for (const file of failure.files || []) {
        const link = el('a', file.split('/').pop(), 'file');
        link.href = withToken(base + '/artifacts/' + file);
        item.appendChild(link);
      }
      list.appendChild(item);
    }
  }

  function renderChanges() {
    const list = $('changes');
    clear(list);
    for (const change of snap.controlChanges || []) {
      const when = new Date(change.atMs).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
      list.appendChild(el('li', when + ' · ' + change.by + ' · ' + change.control + ': ' + change.old + ' → ' + change.new));
    }
  }

  function renderVerdict() {
    const box = $('verdict');
    const verdict = snap.verdict;
    box.hidden = !verdict;
    if (!verdict) return;
    clear(box);
    // An eval is judged by its A/B comparison, not PASS or FAIL.
    const word = snap.state === 'cancelled' ? 'CANCELLED'
      : verdict.evalVerdict ? 'eval: ' + verdict.evalVerdict
      : verdict.ok ? 'PASS' : 'FAIL';
    box.dataset.verdict = verdict.evalVerdict && snap.state !== 'cancelled' ? 'EVAL' : word;
    box.appendChild(el('strong', word + (verdict.exitCode !== undefined ? ' · exit ' + verdict.exitCode : '')));
    if (verdict.report) {
      const link = el('a', 'open the report', 'report');
      link.id = 'report-link';
      link.href = withToken(base + '/' + verdict.report);
      box.appendChild(link);
    }
    if (source) { source.close(); setText('link', 'ended'); }
  }

  function renderControls() {
    const steerable = !snap.verdict && (snap.state === 'running' || snap.state === 'paused' || snap.state === 'planned');
    $('pause').disabled = !steerable || snap.dispatch.paused;
    $('resume').disabled = !steerable || !snap.dispatch.paused;
    $('cancel').disabled = !steerable;
    $('cancel-kill').disabled = !steerable;
    $('apply').disabled = !steerable;
    $('budget').disabled = !steerable;
    $('max-running').disabled = !steerable;
    // Once decided, nothing is left to steer: the page says so instead of greying out in silence.
    const ended = snap.verdict || snap.state === 'done' || snap.state === 'cancelled';
    $('controls-ended').hidden = !ended;
    if (ended) $('confirm').hidden = true;
  }

  function post(path, body) {
    setText('control-msg', 'sending…');
    const init = { method: 'POST', headers: { Authorization: 'Bearer ' + token } };
    if (body) { init.headers['Content-Type'] = 'application/json'; init.body = JSON.stringify(body); }
    return fetch(base + path, init)
      .then((response) => response.json().then((answer) => {
        if (!response.ok) throw new Error(answer.error + (answer.problems && answer.problems.length ? ': ' + answer.problems.join('; ') : ''));
        setText('control-msg', 'done: ' + path.replace(/^\//, '').replace(/\?.*$/, ''));
      }))
      .catch((error) => setText('control-msg', 'refused: ' + (error.message || error)));
  }

  function ask(text, action) {
    confirmAction = action;
    setText('confirm-text', text);
    $('confirm').hidden = false;
    $('confirm-yes').focus();
  }

  function wire() {
    $('pause').addEventListener('click', () => post('/pause', { by: 'live page' }));
    $('resume').addEventListener('click', () => post('/resume-dispatch', { by: 'live page' }));
    $('cancel').addEventListener('click', () => ask('Cancel this batch? Nothing new is admitted; running jobs finish. The batch ends cancelled.', () => post('/cancel')));
    $('cancel-kill').addEventListener('click', () => ask('Cancel this batch and kill its running jobs? Their runs are lost (resume runs them again).', () => post('/cancel?kill_running=true')));
    $('confirm-yes').addEventListener('click', () => { $('confirm').hidden = true; if (confirmAction) confirmAction(); confirmAction = null; });
    $('confirm-no').addEventListener('click', () => { $('confirm').hidden = true; confirmAction = null; setText('control-msg', 'not cancelled'); });
    $('apply').addEventListener('click', () => {
      const body = { by: 'live page' };
      const budget = $('budget').value.trim();
      const max = $('max-running').value.trim();
      if (budget) body.batchBudgetUsd = Number(budget);
      if (max) body.maxRunning = Number(max);
      if (!budget && !max) { setText('control-msg', 'give a batch budget, a max running or both'); return; }
      post('/adjust', body);
    });
  }

  wire();
  follow();
})();
