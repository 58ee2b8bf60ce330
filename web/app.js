// The page's glue: reads the inputs, calls rcsim's engine (engine.js, built by
// scripts/build-web.sh) and draws what it returns. No numbers are computed here beyond scaling
// for the plots and naming the equilibrium the end state is at.
'use strict';

const EQUILIBRIA = { A: [0, 1], B: [-0.6, -0.8] };  // docs/science/model-spec.md 5.5, default W_V, sphere

let engine = null;

function num(id) {
  const el = document.getElementById(id);
  const v = Number(el.value);
  if (el.value.trim() === '' || !Number.isFinite(v)) throw new Error(`${id}: "${el.value}" is not a number`);
  return v;
}

function int(id, lo, hi) {
  const v = num(id);
  if (!Number.isInteger(v) || v < lo || v > hi) throw new Error(`${id}: ${v} must be an integer in [${lo}, ${hi}]`);
  return v;
}

// Calls an engine function with Float64 arrays in and one Float64 array out.
function callEngine(fn, inputs, outLength, scalarsBefore, scalarsAfter) {
  const ptrs = inputs.map((a) => {
    const p = engine._malloc(8 * a.length);
    engine.HEAPF64.set(a, p / 8);
    return p;
  });
  const out = engine._malloc(8 * outLength);
  try {
    const rc = fn(...scalarsBefore(ptrs, out));
    if (rc !== 0) throw new Error(`engine returned ${rc}`);
    return Float64Array.from(engine.HEAPF64.subarray(out / 8, out / 8 + outLength));
  } finally {
    ptrs.forEach((p) => engine._free(p));
    engine._free(out);
  }
}

// ---------------- Figure 1 ----------------
// generation: the number of the latest request; last: its trajectory and basins (for the test).
const fig1 = { canvas: null, scale: 1.6, generation: 0, last: null };

function fig1ToCanvas(x, y) {
  const c = fig1.canvas, s = fig1.scale;
  return [c.width / 2 + (x / s) * (c.width / 2 - 10), c.height / 2 - (y / s) * (c.height / 2 - 10)];
}

// Reads Figure 1's inputs: what figure1Slices needs.
function figure1Inputs() {
  const wv = [num('wv00'), num('wv01'), num('wv10'), num('wv11')];
  const norm = int('fig1-norm', 0, 1);
  const steps = int('fig1-steps', 0, 100000);
  const theta = (num('fig1-angle') * Math.PI) / 180;
  const x0 = [0, 1, Math.cos(theta), Math.sin(theta)];
  return { wv, x0, norm, steps, bsteps: Math.min(steps, 500), count: 360 };
}

// Figure 1's computation: the trajectory of both tokens from x0 through `steps` layers, then, for
// each of `count` starting angles of token 1 (token 0 at (0, 1)), where token 1 is after `bsteps`
// layers (the basin ring). In slices of about `budgetMs`; `pause` (may be null) is awaited between
// slices and may throw to stop. The trajectory is computed in pieces, each piece starting from
// the last state of the one before: rc_figure1 stores X(0) as given and only iterates, so the
// pieces give the values of one call bit for bit. Runs in the worker (its source is copied into
// it) and on the page. Returns the trajectory (X(0) .. X(steps), 4 values each) and token 1's
// end (x, y) for each starting angle.
async function figure1Slices(engine, args, budgetMs, onProgress, pause) {
  const { wv, x0, norm, steps, bsteps, count } = args;
  const total = steps + count * (bsteps + 1);
  const wvPtr = engine._malloc(8 * 4), startPtr = engine._malloc(8 * 4);
  const trajPtr = engine._malloc(8 * 4 * (steps + 1)), endPtr = engine._malloc(8 * 4 * (bsteps + 1));
  const check = (rc) => {
    if (rc !== 0) throw new Error(rc === -1 ? 'the engine refused the arguments' : 'the engine threw an exception');
  };
  try {
    engine.HEAPF64.set(wv, wvPtr / 8);
    engine.HEAPF64.set(x0, trajPtr / 8);
    const ends = new Float64Array(2 * count);
    let done = 0, chunk = 1, k = 0;
    while (done < total) {
      const t0 = performance.now();
      if (done < steps) {
        const c = Math.min(chunk, steps - done), at = trajPtr + 32 * done;
        check(engine._rc_figure1(wvPtr, at, norm, c, at));
        done += c;
      } else {
        const last = Math.min(count, k + Math.max(1, Math.floor(chunk / (bsteps + 1))));
        for (; k < last; ++k) {
          const th = (2 * Math.PI * k) / count;
          engine.HEAPF64.set([0, 1, Math.cos(th), Math.sin(th)], startPtr / 8);
          check(engine._rc_figure1(wvPtr, startPtr, norm, bsteps, endPtr));
          ends[2 * k] = engine.HEAPF64[endPtr / 8 + 4 * bsteps + 2];
          ends[2 * k + 1] = engine.HEAPF64[endPtr / 8 + 4 * bsteps + 3];
          done += bsteps + 1;
        }
      }
      const ms = performance.now() - t0;
      if (ms < budgetMs / 2) chunk *= 2;
      else if (ms > budgetMs) chunk = Math.max(1, Math.floor(chunk / 2));
      onProgress(done, total);
      if (pause && done < total) await pause();
    }
    const traj = Float64Array.from(engine.HEAPF64.subarray(trajPtr / 8, trajPtr / 8 + 4 * (steps + 1)));
    return { traj, ends };
  } finally {
    for (const ptr of [wvPtr, startPtr, trajPtr, endPtr]) engine._free(ptr);
  }
}

// The equilibrium (x, y) is at, within 1e-6: 'A', 'B' or ''.
function equilibriumAt(x, y) {
  let at = '';
  for (const [name, e] of Object.entries(EQUILIBRIA)) if (Math.hypot(x - e[0], y - e[1]) < 1e-6) at = name;
  return at;
}

function setFigure1State(state) {
  document.getElementById('fig1-result').dataset.state = state;
  document.getElementById('fig1-cancel').disabled = state !== 'running';
}

// An error replaces the result and the plot (no stale numbers or trajectories under it).
function showFigure1Error(message) {
  const out = document.getElementById('fig1-result');
  out.className = 'out error';
  out.dataset.equilibrium = 'error';
  delete out.dataset.x1; delete out.dataset.y1; delete out.dataset.basins;
  out.textContent = message;
  fig1.last = null;
  drawPlotError(fig1.canvas, message);
  document.getElementById('fig1-progress').value = 0;
  document.getElementById('fig1-progress-text').textContent = '';
  setFigure1State('error');
}

// Computes Figure 1 in figure1Runner's Web Worker (or on the page in slices) and draws it. A new
// request (Run, a changed input, a click on the circle) cancels the running one; a request made
// stale by a newer one changes nothing when it ends.
async function runFigure1() {
  const out = document.getElementById('fig1-result');
  const generation = ++fig1.generation;
  out.dataset.request = generation;
  let args;
  try {
    args = figure1Inputs();
  } catch (e) {
    figure1Runner.cancel();
    showFigure1Error(String(e.message || e));
    return;
  }
  const { steps, bsteps, count } = args;
  const bar = document.getElementById('fig1-progress'), text = document.getElementById('fig1-progress-text');
  const onProgress = (done, total) => {
    bar.value = total > 0 ? done / total : 1;
    out.dataset.done = done;
    if (done >= total) text.textContent = `done: ${steps} layers, basins ${count} starts x ${bsteps} layers`;
    else if (done < steps) text.textContent = `trajectory: layer ${done} of ${steps}`;
    else text.textContent = `basins: start angle ${Math.floor((done - steps) / (bsteps + 1))} of ${count}`;
  };
  bar.value = 0;
  text.textContent = 'starting';
  out.dataset.done = 0;
  setFigure1State('running');
  let res;
  try {
    res = await figure1Runner.run(args, onProgress);
  } catch (e) {
    if (generation !== fig1.generation) return;  // a newer request replaced this one
    if (e instanceof Cancelled) {
      text.textContent = `cancelled after ${out.dataset.done} of ${steps + count * (bsteps + 1)} layers; the plot shows the previous result`;
      setFigure1State('cancelled');
      return;
    }
    showFigure1Error(`the computation failed: ${e.message || e}`);
    return;
  }
  if (generation !== fig1.generation) return;
  const { traj } = res;
  const end = Array.from(traj.slice(4 * steps, 4 * steps + 4));
  const at = equilibriumAt(end[2], end[3]) || 'neither';
  const ends = [];
  for (let k = 0; k < count; ++k) ends.push(equilibriumAt(res.ends[2 * k], res.ends[2 * k + 1]));
  out.dataset.x1 = end[2];
  out.dataset.y1 = end[3];
  out.dataset.equilibrium = at;
  out.dataset.basins = ends.map((e) => e || '-').join('');
  out.className = 'out';
  out.textContent =
    `after ${steps} layers:\n` +
    `token 0 = (${end[0].toFixed(6)}, ${end[1].toFixed(6)})\n` +
    `token 1 = (${end[2].toFixed(6)}, ${end[3].toFixed(6)})\n` +
    `token 1 is at: ${at === 'neither' ? 'neither A nor B' : at}`;
  fig1.last = { traj, ends };
  drawFigure1(traj, steps, ends);
  setFigure1State('done');
}

const BASIN_COLOURS = { A: 'rgba(0, 160, 0, 0.35)', B: 'rgba(230, 120, 0, 0.45)', '': 'rgba(120, 120, 120, 0.2)' };

function drawFigure1(traj, steps, ends) {
  const c = fig1.canvas, g = c.getContext('2d');
  let extent = 1.3;
  for (let i = 0; i < traj.length; ++i) if (Number.isFinite(traj[i])) extent = Math.max(extent, Math.abs(traj[i]));
  fig1.scale = Math.min(extent * 1.1, 1e6);
  g.clearRect(0, 0, c.width, c.height);
  // axes and unit circle
  g.strokeStyle = '#ddd';
  g.beginPath();
  g.moveTo(...fig1ToCanvas(-fig1.scale, 0)); g.lineTo(...fig1ToCanvas(fig1.scale, 0));
  g.moveTo(...fig1ToCanvas(0, -fig1.scale)); g.lineTo(...fig1ToCanvas(0, fig1.scale));
  g.stroke();
  const [cx, cy] = fig1ToCanvas(0, 0);
  const r = fig1ToCanvas(1, 0)[0] - cx;
  // basins: the arc of starting angles from which token 1 ends at A (green) or B (orange)
  g.lineWidth = 10;
  ends.forEach((at, k) => {
    const a0 = (2 * Math.PI * k) / ends.length, a1 = (2 * Math.PI * (k + 1)) / ends.length;
    g.strokeStyle = BASIN_COLOURS[at];
    g.beginPath(); g.arc(cx, cy, r + 8, -a1, -a0); g.stroke();
  });
  g.lineWidth = 1;
  g.strokeStyle = '#888';
  g.beginPath(); g.arc(cx, cy, r, 0, 2 * Math.PI); g.stroke();
  // equilibria
  g.font = '14px sans-serif';
  for (const [name, e] of Object.entries(EQUILIBRIA)) {
    const [px, py] = fig1ToCanvas(e[0], e[1]);
    g.fillStyle = '#080';
    g.beginPath(); g.arc(px, py, 6, 0, 2 * Math.PI); g.fill();
    g.fillText(name, px + 8, py - 8);
  }
  // trajectories: token 0 blue, token 1 red
  for (const [tok, colour] of [[0, '#14c'], [1, '#c21']]) {
    g.strokeStyle = colour;
    g.fillStyle = colour;
    g.beginPath();
    // A point at the same place as the one before is not drawn again: a zero-length segment
    // draws nothing (the canvas removes it), and a converged trajectory of 100000 layers is
    // mostly one point repeated (drawing it took 0.1 s).
    let qx = NaN, qy = NaN;
    for (let t = 0; t <= steps; ++t) {
      const [px, py] = fig1ToCanvas(traj[4 * t + 2 * tok], traj[4 * t + 2 * tok + 1]);
      if (t === 0) g.moveTo(px, py); else if (px !== qx || py !== qy) g.lineTo(px, py);
      qx = px; qy = py;
    }
    g.stroke();
    for (let t = 0; t <= Math.min(steps, 60); ++t) {
      const [px, py] = fig1ToCanvas(traj[4 * t + 2 * tok], traj[4 * t + 2 * tok + 1]);
      g.fillRect(px - 1.5, py - 1.5, 3, 3);
    }
    const [sx, sy] = fig1ToCanvas(traj[2 * tok], traj[2 * tok + 1]);
    g.beginPath(); g.arc(sx, sy, 5, 0, 2 * Math.PI); g.stroke();
  }
  g.fillStyle = '#000';
  g.fillText('token 0 (blue), token 1 (red); circles: start', 10, c.height - 26);
  g.fillText('ring: token 1 starting here ends at A (green), B (orange)', 10, c.height - 10);
}

function placeToken1(ev) {
  const c = fig1.canvas, rect = c.getBoundingClientRect();
  const px = ((ev.clientX - rect.left) * c.width) / rect.width - c.width / 2;
  const py = c.height / 2 - ((ev.clientY - rect.top) * c.height) / rect.height;
  document.getElementById('fig1-angle').value = ((Math.atan2(py, px) * 180) / Math.PI).toFixed(2);
  runFigure1();
}

// ---------------- Collapse explorer ----------------
// A plot area that shows an error instead of what it drew before.
function drawPlotError(canvas, message) {
  const g = canvas.getContext('2d');
  g.clearRect(0, 0, canvas.width, canvas.height);
  g.fillStyle = '#b00';
  g.font = '15px sans-serif';
  const words = String(message).split(/\s+/);
  let line = '', y = 40;
  for (const w of words) {
    if (g.measureText(`${line} ${w}`).width > canvas.width - 40 && line) {
      g.fillText(line, 20, y); y += 20; line = w;
    } else line = line ? `${line} ${w}` : w;
  }
  g.fillText(line, 20, y);
}

// An input error that names the field; shown next to it.
class FieldError extends Error {
  constructor(id, message) { super(`${id}: ${message}`); this.field = id; }
}

function intField(id, lo, hi) {
  const el = document.getElementById(id);
  const v = Number(el.value);
  if (el.value.trim() === '' || !Number.isFinite(v)) throw new FieldError(id, `"${el.value}" is not a number`);
  if (!Number.isInteger(v) || v < lo || v > hi) throw new FieldError(id, `${v} must be an integer in [${lo}, ${hi}]`);
  return v;
}

// d_QK: a positive number (16, 0.015625, 1e-3), a fraction of two such numbers (1/64), or auto
// (= d_k). A fraction is divided once, so 1/64 is exactly 0.015625.
const DQK_ALLOWED = 'allowed: a positive number (16, 0.015625, 1e-3), a fraction (1/64) or auto (= d_k)';
function parseDqk(text, dk) {
  const t = text.trim();
  if (t === 'auto') return dk;
  const numberRe = '(\\d+(?:\\.\\d*)?|\\.\\d+)(?:[eE][+-]?\\d+)?';
  const m = t.match(new RegExp(`^(${numberRe})(?:\\s*/\\s*(${numberRe}))?$`));
  if (!m) throw new FieldError('col-dqk', `"${text}" is not a number; ${DQK_ALLOWED}`);
  const v = m[4] === undefined ? Number(m[1]) : Number(m[1]) / Number(m[4]);
  if (!(v > 0) || !Number.isFinite(v)) throw new FieldError('col-dqk', `"${text}" = ${v} is not positive and finite; ${DQK_ALLOWED}`);
  return v;
}

const MASK_NAMES = ['complete', 'causal', 'sliding_window', 'unidirectional_sliding_window'];
const NORM_NAMES = ['none', 'sphere', 'layernorm', 'projection', 'rmsnorm'];
const RUN_COLOURS = ['#14c', '#c21', '#080', '#a50', '#73c', '#088', '#c0a', '#555'];
const COLLAPSE_FIELDS = ['col-n', 'col-d', 'col-dk', 'col-dqk', 'col-heads', 'col-window', 'col-depth', 'col-trials', 'col-seed'];

// Reads the inputs: the engine's arguments and a label naming the run's settings.
function collapseInputs() {
  const n = intField('col-n', 1, 256), d = intField('col-d', 1, 64);
  const dkText = document.getElementById('col-dk').value.trim();
  const dk = dkText === 'auto' ? d : intField('col-dk', 1, 64);
  const dqkText = document.getElementById('col-dqk').value;
  const dqk = parseDqk(dqkText, dk);
  const heads = intField('col-heads', 1, 8), mask = Number(document.getElementById('col-mask').value);
  const sliding = mask >= 2;
  const window = sliding ? intField('col-window', 0, 256) : 0;
  const norm = Number(document.getElementById('col-norm').value);
  const depth = intField('col-depth', 0, 2000), trials = intField('col-trials', 1, 20);
  const seed = intField('col-seed', 0, Number.MAX_SAFE_INTEGER);
  const dqkLabel = dqkText.trim() === 'auto' ? String(dk) : dqkText.trim().replace(/\s+/g, '');
  const label = `N ${n}, d ${d}, d_k ${dk}, d_QK ${dqkLabel}, ${heads} head${heads > 1 ? 's' : ''}, ` +
    `mask ${MASK_NAMES[mask]}${sliding ? ` (window ${window})` : ''}, norm ${NORM_NAMES[norm]}, ` +
    `${depth} layers, ${trials} trial${trials > 1 ? 's' : ''}, seed ${seed}`;
  return { args: [n, d, dk, dqk, heads, mask, window, norm, depth, trials, seed], depth, trials, label };
}

// Computes a run with the engine's resumable interface, in slices of about `budgetMs`;
// `pause` (may be null) is awaited between slices and may throw to stop. Returns mu and mu_rel
// as the engine wrote them. Runs in the worker (its source is copied into it) and on the page.
async function collapseSlices(engine, args, budgetMs, onProgress, pause) {
  const depth = args[8], trials = args[9], total = trials * (depth + 1);
  const rc = engine._rc_collapse_begin(...args);
  if (rc !== 0) throw new Error(rc === -1 ? 'the engine refused the arguments' : 'the engine threw an exception');
  const out = engine._malloc(8 * 2 * total);
  try {
    let done = 0, chunk = 1;
    while (done < total) {
      const t0 = performance.now();
      done = engine._rc_collapse_advance(chunk, out);
      if (done < 0) throw new Error(`the engine failed (${done})`);
      const ms = performance.now() - t0;
      if (ms < budgetMs / 2) chunk *= 2;
      else if (ms > budgetMs) chunk = Math.max(1, Math.floor(chunk / 2));
      onProgress(done, total);
      if (pause && done < total) await pause();
    }
    return Float64Array.from(engine.HEAPF64.subarray(out / 8, out / 8 + 2 * total));
  } finally {
    engine._free(out);
  }
}

// The workers' program (its source is put in a Blob after the engine's): computes a request
// {id, kind, args} with collapseSlices or figure1Slices and posts progress and the result.
function engineWorkerMain(scope) {
  const slices = { collapse: collapseSlices, figure1: figure1Slices };
  const ready = createRcsimEngine();
  ready.then(() => scope.postMessage({ type: 'ready' }), (e) => scope.postMessage({ type: 'failed', message: String(e) }));
  scope.onmessage = async (ev) => {
    const { id, kind, args } = ev.data;
    try {
      const engine = await ready;
      let last = 0;
      const res = await slices[kind](engine, args, 50, (done, total) => {
        const now = performance.now();
        if (now - last > 40 || done === total) { last = now; scope.postMessage({ type: 'progress', id, done, total }); }
      }, null);
      const buffers = ArrayBuffer.isView(res) ? [res.buffer] : Object.values(res).filter(ArrayBuffer.isView).map((a) => a.buffer);
      scope.postMessage({ type: 'result', id, res }, buffers);
    } catch (e) {
      scope.postMessage({ type: 'error', id, message: String(e.message || e) });
    }
  };
}

class Cancelled extends Error {}

// The worker's source: the engine (WebAssembly included), the two slice functions, the program.
let engineWorkerSource = null;
function workerSource() {
  if (!engineWorkerSource) {
    engineWorkerSource = `${rcsimEngineScope.toString()}\nvar createRcsimEngine = rcsimEngineScope();\n` +
      `${collapseSlices.toString()}\n${figure1Slices.toString()}\n(${engineWorkerMain.toString()})(self);\n`;
  }
  return engineWorkerSource;
}

// Runs one kind of computation ('collapse' or 'figure1', each with its own runner and worker, so
// that Figure 1 answers while a long collapse run computes) in a Web Worker made from a Blob
// (engine.js's source, which a page opened as file:// can neither fetch nor start as a Worker by
// URL), or, when the browser refuses a worker (or with ?worker=0 in the URL), on the page in
// slices of about 15 ms, one per macrotask. One job at a time: a new one cancels the running one.
// `slices`: collapseSlices or figure1Slices; `modeKey`: the body's data attribute that names the
// mode; `modeId`: the element that says it.
function makeRunner(kind, slices, modeKey, modeId) {
  return {
    kind, mode: 'starting', reason: '', worker: null, workerReady: null, job: null, nextId: 1,

    startWorker() {
      if (new URLSearchParams(location.search).get('worker') === '0') return this.useMainThread('?worker=0 in the URL');
      let w;
      try {
        const url = URL.createObjectURL(new Blob([workerSource()], { type: 'text/javascript' }));
        w = new Worker(url);
        URL.revokeObjectURL(url);
      } catch (e) {
        return this.useMainThread(`the browser refused a Worker: ${e.message || e}`);
      }
      this.worker = w;
      this.workerReady = new Promise((resolve, reject) => {
        w.onerror = (e) => { e.preventDefault(); reject(new Error(e.message || 'worker error')); };
        w.onmessage = (ev) => {
          const m = ev.data;
          if (m.type === 'ready') { this.setMode('worker', ''); resolve(); return; }
          if (m.type === 'failed') { reject(new Error(m.message)); return; }
          const job = this.job;
          if (!job || job.id !== m.id) return;
          if (m.type === 'progress') job.onProgress(m.done, m.total);
          else if (m.type === 'result') { this.job = null; job.resolve(m.res); }
          else if (m.type === 'error') { this.job = null; job.reject(new Error(m.message)); }
        };
      });
      this.workerReady.catch((e) => {
        if (this.worker !== w) return;
        w.terminate();
        this.worker = null;
        this.useMainThread(`the worker did not start: ${e.message}`);
        // A job sent to the failed worker is computed on the page instead.
        const job = this.job;
        if (job) { this.job = null; this.run(job.args, job.onProgress).then(job.resolve, job.reject); }
      });
    },

    useMainThread(reason) {
      this.worker = null;
      this.setMode('main', reason);
    },

    setMode(mode, reason) {
      this.mode = mode;
      this.reason = reason;
      document.body.dataset[modeKey] = mode;
      const el = document.getElementById(modeId);
      if (el) el.textContent = mode === 'worker' ? 'computing in a Web Worker' : `computing on the page in slices (${reason})`;
    },

    // Resolves to the result of `slices`, rejects with Cancelled when cancelled.
    run(args, onProgress) {
      this.cancel();
      return new Promise((resolve, reject) => {
        const job = { id: this.nextId++, args, onProgress, resolve, reject, cancelled: false };
        this.job = job;
        if (this.worker) {
          this.worker.postMessage({ id: job.id, kind, args });
          return;
        }
        const pause = () => new Promise((res, rej) => {
          const ch = new MessageChannel();
          ch.port1.onmessage = () => (job.cancelled ? rej(new Cancelled('cancelled')) : res());
          ch.port2.postMessage(0);
        });
        slices(engine, args, 15, onProgress, pause).then((res) => {
          if (this.job === job) this.job = null;
          if (job.cancelled) reject(new Cancelled('cancelled')); else resolve(res);
        }, (e) => {
          if (this.job === job) this.job = null;
          reject(job.cancelled ? new Cancelled('cancelled') : e);
        });
      });
    },

    // Stops the running job (a worker is terminated and a fresh one started).
    cancel() {
      const job = this.job;
      if (!job) return false;
      this.job = null;
      job.cancelled = true;
      if (this.worker) {
        this.worker.terminate();
        this.worker = null;
        this.startWorker();
        job.reject(new Cancelled('cancelled'));
      }
      return true;
    },
  };
}

const collapseRunner = makeRunner('collapse', collapseSlices, 'collapseMode', 'col-mode');
const figure1Runner = makeRunner('figure1', figure1Slices, 'figure1Mode', 'fig1-mode');

// The drawn runs: kept ones, then the latest.
const collapse = { kept: [], current: null, error: null, generation: 0 };

function setCollapseState(state) {
  document.getElementById('col-result').dataset.state = state;
  const running = state === 'running';
  document.getElementById('col-cancel').disabled = !running;
  document.getElementById('col-keep').disabled = running || !collapse.current;
  document.getElementById('col-clear').disabled = collapse.kept.length === 0;
}

function showCollapseError(message, field) {
  const out = document.getElementById('col-result');
  for (const id of COLLAPSE_FIELDS) {
    document.getElementById(`${id}-msg`).textContent = '';
    document.getElementById(id).classList.remove('invalid');
  }
  if (field) {
    document.getElementById(`${field}-msg`).textContent = message.replace(`${field}: `, '');
    document.getElementById(field).classList.add('invalid');
  }
  collapse.error = message;
  collapse.current = null;
  out.className = 'out error';
  out.textContent = message;
  delete out.dataset.mu0; delete out.dataset.muEnd; delete out.dataset.relEnd;
  redrawCollapse();
  setCollapseState('error');
}

async function runCollapse() {
  const out = document.getElementById('col-result');
  // A newer click makes this run stale: it then changes nothing when it ends or is cancelled.
  const generation = ++collapse.generation;
  let inputs;
  try {
    inputs = collapseInputs();
  } catch (e) {
    collapseRunner.cancel();
    showCollapseError(String(e.message || e), e.field);
    return;
  }
  for (const id of COLLAPSE_FIELDS) {
    document.getElementById(`${id}-msg`).textContent = '';
    document.getElementById(id).classList.remove('invalid');
  }
  const { args, depth, trials, label } = inputs;
  const bar = document.getElementById('col-progress'), text = document.getElementById('col-progress-text');
  const onProgress = (done, total) => {
    bar.value = done / total;
    const trial = Math.min(trials, Math.floor(done / (depth + 1)) + 1);
    text.textContent = done === total ? `${total} of ${total} values` :
      `trial ${trial} of ${trials}, layer ${done % (depth + 1)} of ${depth} (${((100 * done) / total).toFixed(0)}%)`;
    out.dataset.done = done;
  };
  bar.value = 0;
  text.textContent = 'starting';
  out.dataset.done = 0;
  setCollapseState('running');
  const t0 = performance.now();
  let res;
  try {
    res = await collapseRunner.run(args, onProgress);
  } catch (e) {
    if (generation !== collapse.generation) return;  // a newer run (or refused input) replaced this one
    if (e instanceof Cancelled) {
      text.textContent = `cancelled after ${out.dataset.done} of ${trials * (depth + 1)} values`;
      setCollapseState('cancelled');
      return;
    }
    showCollapseError(`the computation failed: ${e.message || e}`);
    return;
  }
  if (generation !== collapse.generation) return;
  const ms = performance.now() - t0;
  const mu = [], rel = [];
  for (let t = 0; t < trials; ++t) {
    mu.push([]); rel.push([]);
    for (let l = 0; l <= depth; ++l) {
      mu[t].push(res[2 * (t * (depth + 1) + l)]);
      rel[t].push(res[2 * (t * (depth + 1) + l) + 1]);
    }
  }
  collapse.error = null;
  // The first colour no kept run has (blue when none is kept).
  const colour = RUN_COLOURS.find((c) => !collapse.kept.some((k) => k.colour === c)) ||
    RUN_COLOURS[collapse.kept.length % RUN_COLOURS.length];
  collapse.current = { mu, rel, depth, label, colour };
  redrawCollapse();
  out.className = 'out';
  out.dataset.mu0 = mu[0][0];
  out.dataset.muEnd = mu[0][depth];
  out.dataset.relEnd = rel[0][depth];
  out.dataset.mu = mu.map((m) => m.join(',')).join(';');
  out.textContent = `${trials} trials, ${depth} layers in ${ms.toFixed(0)} ms (${collapseRunner.mode === 'worker' ? 'Web Worker' : 'on the page'})\n` +
    mu.map((m, t) => `trial ${t}: mu ${m[0].toExponential(3)} -> ${m[depth].toExponential(3)}, ` +
      `mu_rel ${rel[t][0].toExponential(3)} -> ${rel[t][depth].toExponential(3)}`).join('\n');
  setCollapseState('done');
}

function redrawCollapse() {
  const c = document.getElementById('col-canvas');
  const legend = document.getElementById('col-legend');
  legend.textContent = '';
  if (collapse.error) {
    drawPlotError(c, collapse.error);
    return;
  }
  const runs = collapse.current ? [...collapse.kept, collapse.current] : collapse.kept;
  for (const r of runs) {
    const li = document.createElement('li');
    const sw = document.createElement('span');
    sw.className = 'swatch';
    sw.style.background = r.colour;
    li.append(sw, `${r.label}${r === collapse.current ? '' : ' (kept)'}`);
    legend.append(li);
  }
  drawCollapse(runs);
}

function drawCollapse(runs) {
  const c = document.getElementById('col-canvas'), g = c.getContext('2d');
  g.clearRect(0, 0, c.width, c.height);
  if (runs.length === 0) return;
  const floor = 1e-300;
  const logs = runs.flatMap((r) => [...r.mu.flat(), ...r.rel.flat()]).filter((v) => Number.isFinite(v)).map((v) => Math.log10(Math.max(v, floor)));
  let lo = Math.floor(Math.min(...logs)), hi = Math.ceil(Math.max(...logs));
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) { lo = 0; hi = 1; }
  if (hi === lo) hi = lo + 1;
  const depth = Math.max(...runs.map((r) => r.depth));
  const L = 60, R = c.width - 20, T = 20, B = c.height - 40;
  // Layer axis: log(1 + l) when the box is ticked (collapse curves are read on log-log axes), else linear.
  const logX = document.getElementById('col-logx').checked;
  const xs = (l) => (logX ? Math.log10(1 + l) / Math.log10(1 + Math.max(depth, 1)) : l / Math.max(depth, 1));
  const X = (l) => L + (R - L) * xs(l);
  const Y = (v) => B - ((B - T) * (Math.log10(Math.max(v, floor)) - lo)) / (hi - lo);
  g.strokeStyle = '#000';
  g.strokeRect(L, T, R - L, B - T);
  g.fillStyle = '#000';
  g.font = '12px sans-serif';
  const step = Math.max(1, Math.ceil((hi - lo) / 8));
  for (let e = lo; e <= hi; e += step) {
    g.fillText(`1e${e}`, 5, Y(10 ** e) + 4);
    g.strokeStyle = '#eee';
    g.beginPath(); g.moveTo(L, Y(10 ** e)); g.lineTo(R, Y(10 ** e)); g.stroke();
  }
  const ticks = logX ? [0, ...[1, 10, 100, 1000].filter((t) => t < depth), depth] : [0, depth];
  for (const t of ticks) g.fillText(String(t), X(t) - (t === depth ? 20 : 0), B + 15);
  g.fillText(logX ? 'layer (axis: log(1 + layer))' : 'layer', (L + R) / 2 - 40, B + 30);
  for (const r of runs) {
    g.strokeStyle = r.colour;
    for (const [series, dash] of [[r.mu, []], [r.rel, [5, 3]]]) {
      g.setLineDash(dash);
      for (const s of series) {
        g.beginPath();
        s.forEach((v, l) => (l === 0 ? g.moveTo(X(l), Y(v)) : g.lineTo(X(l), Y(v))));
        g.stroke();
      }
    }
  }
  g.setLineDash([]);
  g.fillStyle = '#000';
  g.fillText('mu solid, mu_rel dashed; one colour per run (legend)', R - 330, T + 15);
}

function keepCollapse() {
  if (!collapse.current) return;
  collapse.kept.push(collapse.current);
  collapse.current = null;
  redrawCollapse();
  setCollapseState(document.getElementById('col-result').dataset.state);
}

function clearKept() {
  collapse.kept = [];
  redrawCollapse();
  setCollapseState(document.getElementById('col-result').dataset.state);
}

function updateWindowField() {
  const sliding = Number(document.getElementById('col-mask').value) >= 2;
  document.getElementById('col-window').disabled = !sliding;
}

// ---------------- Selectable keys ----------------
const KEY_COLOURS = ['#14c', '#73c', '#080', '#a50'];

function runBrody() {
  const out = document.getElementById('brody-result');
  try {
    const m = num('brody-m'), theta = int('brody-theta', 0, 359);
    const proj = document.getElementById('brody-proj').checked ? 1 : 0;
    const scale = document.getElementById('brody-scale').checked ? 1 : 0;
    document.getElementById('brody-m-value').textContent = m.toFixed(2);
    document.getElementById('brody-theta-value').textContent = String(theta);
    const r = callEngine(engine._rc_brody, [], 24, (p, o) => [m, 360, 4, proj, scale, theta, o]);
    const keys = [0, 1, 2, 3].map((j) => [r[2 * j], r[2 * j + 1]]);
    const selectable = Array.from(r.slice(8, 12));
    const weights = Array.from(r.slice(12, 16)), best = Array.from(r.slice(16, 20));
    const along = Array.from(r.slice(20, 24));
    out.dataset.along = along.join(',');
    out.dataset.selectable = selectable.join('');
    out.dataset.weights = weights.join(',');
    out.dataset.best = best.join(',');
    out.className = 'out';
    out.textContent = keys.map((k, j) => `key ${j + 1}: ${selectable[j] ? 'selectable  ' : 'UNSELECTABLE'} ` +
      `weight ${weights[j].toFixed(3)}, best over theta ${best[j].toFixed(3)}, along 1 ${along[j].toFixed(3)}`).join('\n');
    drawBrody(keys, selectable, weights, theta);
    drawBrodySide(along, proj);
  } catch (e) {
    out.className = 'out error';
    out.textContent = String(e.message || e);
    for (const id of ['brody-canvas', 'brody-bars', 'brody-side']) drawPlotError(document.getElementById(id), out.textContent);
  }
}

// Convex hull (Andrew's monotone chain), only to draw the outline of the keys.
function hull(points) {
  const p = points.slice().sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const cross = (o, a, b) => (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]);
  const half = (pts) => {
    const h = [];
    for (const q of pts) {
      while (h.length >= 2 && cross(h[h.length - 2], h[h.length - 1], q) <= 0) h.pop();
      h.push(q);
    }
    h.pop();
    return h;
  };
  return half(p).concat(half(p.reverse()));
}

function drawBrody(keys, selectable, weights, theta) {
  const c = document.getElementById('brody-canvas'), g = c.getContext('2d');
  g.clearRect(0, 0, c.width, c.height);
  let extent = 1.2;
  for (const k of keys) extent = Math.max(extent, Math.abs(k[0]) * 1.15, Math.abs(k[1]) * 1.15);
  const T = (x, y) => [c.width / 2 + (x / extent) * (c.width / 2 - 20), c.height / 2 - (y / extent) * (c.height / 2 - 20)];
  g.strokeStyle = '#ddd';
  g.beginPath(); g.moveTo(...T(-extent, 0)); g.lineTo(...T(extent, 0)); g.moveTo(...T(0, -extent)); g.lineTo(...T(0, extent)); g.stroke();
  const h = hull(keys);
  g.fillStyle = 'rgba(100, 100, 200, 0.12)';
  g.strokeStyle = '#669';
  g.beginPath();
  h.forEach((p, i) => (i === 0 ? g.moveTo(...T(...p)) : g.lineTo(...T(...p))));
  g.closePath(); g.fill(); g.stroke();
  // query direction (unit arrow scaled to the plot)
  const th = (theta * Math.PI) / 180, qx = Math.cos(th) * extent * 0.9, qy = Math.sin(th) * extent * 0.9;
  g.strokeStyle = '#000'; g.lineWidth = 2;
  g.beginPath(); g.moveTo(...T(0, 0)); g.lineTo(...T(qx, qy)); g.stroke();
  g.lineWidth = 1; g.fillStyle = '#000'; g.font = '14px sans-serif';
  g.fillText('q', ...T(qx * 1.05, qy * 1.05));
  keys.forEach((k, j) => {
    const [px, py] = T(...k);
    g.fillStyle = KEY_COLOURS[j];
    g.beginPath(); g.arc(px, py, 7, 0, 2 * Math.PI); g.fill();
    g.fillText(`k${j + 1}`, px + 9, py - 9);
    if (!selectable[j]) {
      g.strokeStyle = '#d00'; g.lineWidth = 3;
      g.beginPath(); g.moveTo(px - 11, py - 11); g.lineTo(px + 11, py + 11); g.moveTo(px + 11, py - 11); g.lineTo(px - 11, py + 11); g.stroke();
      g.lineWidth = 1;
    }
  });
  const b = document.getElementById('brody-bars'), gb = b.getContext('2d');
  gb.clearRect(0, 0, b.width, b.height);
  gb.font = '13px sans-serif';
  weights.forEach((w, j) => {
    const x = 20 + j * 85, hgt = w * (b.height - 50);
    gb.fillStyle = KEY_COLOURS[j];
    gb.fillRect(x, b.height - 25 - hgt, 50, hgt);
    gb.fillStyle = '#000';
    gb.fillText(`k${j + 1}${selectable[j] ? '' : ' (unsel.)'}`, x, b.height - 8);
    gb.fillText(w.toFixed(3), x + 5, b.height - 30 - hgt);
  });
}

// The keys' components along 1 = (1, 1, 1)/sqrt 3: what the projection removes.
function drawBrodySide(along, proj) {
  const c = document.getElementById('brody-side'), g = c.getContext('2d');
  g.clearRect(0, 0, c.width, c.height);
  const mid = 68, scale = 40 / 1.8;  // |component| <= sqrt 3 (a scaled key has norm sqrt 3) fits
  g.strokeStyle = '#999';
  g.beginPath(); g.moveTo(10, mid); g.lineTo(c.width - 10, mid); g.stroke();
  g.font = '13px sans-serif';
  g.fillStyle = '#000';
  g.fillText(`component along 1 = (1,1,1)/√3 ${proj ? '(projection on: all 0)' : '(removed by projection)'}`, 10, 14);
  along.forEach((a, j) => {
    const x = 40 + j * 85, y = mid - Math.max(-1.8, Math.min(1.8, a)) * scale;
    g.strokeStyle = KEY_COLOURS[j]; g.lineWidth = 3;
    g.beginPath(); g.moveTo(x, mid); g.lineTo(x, y); g.stroke();
    g.lineWidth = 1;
    g.fillStyle = KEY_COLOURS[j];
    g.beginPath(); g.arc(x, y, 6, 0, 2 * Math.PI); g.fill();
    g.fillStyle = '#000';
    g.fillText(`k${j + 1} ${a.toFixed(2)}`, x - 18, c.height - 4);
  });
}

// ---------------- start ----------------
// web/engine.js is built, not shipped (scripts/build-web.sh, emscripten): from a fresh clone it is
// missing, the <script> before this one failed to load, and the page says so with the command
// instead of "Loading" for ever.
function engineMissing() {
  const status = document.getElementById('status');
  status.className = 'error';
  status.dataset.missing = '1';
  status.textContent = '';
  status.append('web/engine.js is missing (built, not shipped): run ');
  const cmd = document.createElement('code');
  cmd.textContent = 'bash scripts/build-web.sh';
  status.append(cmd, ' in the repository, then reload (docs/user/web.md).');
}

if (typeof createRcsimEngine !== 'function') engineMissing();
else createRcsimEngine().then((m) => {
  engine = m;
  fig1.canvas = document.getElementById('fig1-canvas');
  fig1.canvas.addEventListener('click', placeToken1);
  document.getElementById('fig1-run').addEventListener('click', runFigure1);
  document.getElementById('fig1-cancel').addEventListener('click', () => figure1Runner.cancel());
  figure1Runner.startWorker();
  collapseRunner.startWorker();
  document.getElementById('col-run').addEventListener('click', runCollapse);
  document.getElementById('col-cancel').addEventListener('click', () => collapseRunner.cancel());
  document.getElementById('col-keep').addEventListener('click', keepCollapse);
  document.getElementById('col-clear').addEventListener('click', clearKept);
  document.getElementById('col-logx').addEventListener('change', redrawCollapse);
  document.getElementById('col-mask').addEventListener('change', updateWindowField);
  updateWindowField();
  for (const id of ['wv00', 'wv01', 'wv10', 'wv11', 'fig1-norm', 'fig1-angle', 'fig1-steps']) {
    document.getElementById(id).addEventListener('change', runFigure1);
  }
  for (const id of ['brody-m', 'brody-theta', 'brody-proj', 'brody-scale']) {
    document.getElementById(id).addEventListener('input', runBrody);
  }
  runBrody();
  runFigure1();
  runCollapse();
  const status = document.getElementById('status');
  status.textContent = 'rcsim engine loaded.';
  status.dataset.ready = '1';
}, (e) => {
  document.getElementById('status').textContent = `Could not load rcsim's engine: ${e}`;
});
