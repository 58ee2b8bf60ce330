// Browser test of web/index.html: Debian's chromium driven headless by playwright-core (no browser
// download), the page opened as a file:// URL (engine.js embeds the WebAssembly). Sets inputs,
// clicks, reads the numbers the page prints, and saves screenshots into docs/web/.
// Usage (after bash scripts/build-web.sh; in web/: npm ci): node test/page.test.mjs
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
// RCSIM_WEB_DIR: test another copy of the page (e.g. an older one, to see a check fail);
// RCSIM_SHOTS_DIR: where the screenshots go (default docs/web/).
const web = process.env.RCSIM_WEB_DIR ? path.resolve(process.env.RCSIM_WEB_DIR) : path.resolve(here, '..');
const shots = process.env.RCSIM_SHOTS_DIR ? path.resolve(process.env.RCSIM_SHOTS_DIR) : path.resolve(here, '..', '..', 'docs', 'web');
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(path.join(web, 'engine.js'))) {
  console.error('page.test.mjs: web/engine.js missing: run bash scripts/build-web.sh first');
  process.exit(2);
}
if (!fs.existsSync(executablePath)) {
  console.error(`page.test.mjs: no chromium at ${executablePath} (apt-get install chromium, or set CHROMIUM)`);
  process.exit(2);
}

// docs/science/model-spec.md 5.5: with W_V = [[0.5, 1], [0, 1]] and the sphere, token 1 ends at A or B.
const A = [0, 1], B = [-0.6, -0.8];

// How long to wait for a run to end (RCSIM_TEST_WAIT_MS: shorter to run the checks against an old page).
const waitMs = Number(process.env.RCSIM_TEST_WAIT_MS || 60000);

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rcsim-chromium-'));
let failures = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures += 1;
    console.log(`FAIL ${name}\n     ${e.message.split('\n').join('\n     ')}`);
  }
}

const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
  viewport: { width: 1150, height: 1250 },
});
try {
  const page = await context.newPage();
  if (process.env.RCSIM_TEST_WAIT_MS) page.setDefaultTimeout(waitMs);
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(pathToFileURL(path.join(web, 'index.html')).href);
  await page.waitForSelector('#status[data-ready="1"]', { timeout: 30000 });

  // Brody's four keys against docs/user/geometry.md section 3 (the table of `rcsim brody-example`):
  // key 2 unselectable from m* = 2.318 on without scaling, selectable with scaling; key 2's best
  // weight over the query angles 0.64 (m = 1), 0.38 (m = 2), 0.29 (m = 3), 0.25 (m = 4).
  const brody = async (m, proj, scale) => {
    await page.locator('#brody-m').fill(String(m));
    await page.setChecked('#brody-proj', proj);
    await page.setChecked('#brody-scale', scale);
    const d = await page.locator('#brody-result').evaluate((el) => ({ ...el.dataset }));
    return { selectable: d.selectable, best: d.best.split(',').map(Number), weights: d.weights.split(',').map(Number) };
  };
  await check('Brody: m = 1, 2 all selectable; m = 2.30 selectable, 2.34 not (m* = 2.318)', async () => {
    assert.equal((await brody(1, false, false)).selectable, '1111');
    assert.equal((await brody(2, false, false)).selectable, '1111');
    assert.equal((await brody(2.3, false, false)).selectable, '1111');
    assert.equal((await brody(2.34, false, false)).selectable, '1011');
  });
  await check('Brody: key 2 best weights 0.64, 0.38, 0.29, 0.25 for m = 1..4 (docs/user/geometry.md)', async () => {
    const expected = { 1: 0.64, 2: 0.38, 3: 0.29, 4: 0.25 };
    for (const [m, w] of Object.entries(expected)) {
      const r = await brody(Number(m), false, false);
      assert.ok(Math.abs(r.best[1] - w) < 0.005, `m = ${m}: best weight of key 2 ${r.best[1]}, expected ${w}`);
    }
  });
  await check('Brody: m = 3, projection alone leaves key 2 unselectable; scaling, or both, restore it', async () => {
    assert.equal((await brody(3, true, false)).selectable, '1011');
    assert.equal((await brody(3, false, true)).selectable, '1111');
    const both = await brody(3, true, true);
    assert.equal(both.selectable, '1111');
    const sum = both.weights.reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(sum - 1) < 1e-12, `weights sum to ${sum}`);
  });
  // The same decision by the native binary: `rcsim brody-example` prints, per magnitude and
  // toggle, the unselectable keys; the page (the same C++ compiled to WebAssembly) must agree.
  const native = process.env.RCSIM_BIN || path.resolve(here, '..', '..', 'build', 'sim', 'rcsim');
  await check('Brody: the page\'s selectable keys equal `rcsim brody-example` (native) for 8 magnitudes x 4 toggles', async () => {
    assert.ok(fs.existsSync(native), `no native rcsim at ${native} (build it, or set RCSIM_BIN)`);
    const mags = [0.5, 1, 2, 2.3, 2.34, 3, 4, 6];
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'rcsim-brody-'));
    let text;
    try {
      text = execFileSync(native, ['brody-example', `--example.magnitudes=${mags.join(',')}`,
        `--output.file=${path.join(out, 'brody.h5')}`, '--quiet'], { encoding: 'utf8' });
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
    // Table columns: none, scaling, projection, projection+scaling; "-" or a list of key numbers.
    const columns = [[false, false], [false, true], [true, false], [true, true]];
    const rows = text.split('\n').map((l) => l.trim().split(/\s+/)).filter((f) => f.length === 5 && !Number.isNaN(Number(f[0])));
    assert.equal(rows.length, mags.length, `expected ${mags.length} table rows from rcsim brody-example, got:\n${text}`);
    for (const row of rows) {
      const m = Number(row[0]);
      for (let c = 0; c < 4; ++c) {
        const unselectable = row[c + 1] === '-' ? [] : row[c + 1].split(',').map(Number);
        const expected = [1, 2, 3, 4].map((k) => (unselectable.includes(k) ? '0' : '1')).join('');
        const got = (await brody(m, ...columns[c])).selectable;
        assert.equal(got, expected, `m = ${m}, projection ${columns[c][0]}, scaling ${columns[c][1]}: page ${got}, rcsim ${expected}`);
      }
    }
  });
  // The pixels of every canvas of a section, to tell whether a control changed the picture.
  const pixels = (section) => page.locator(section).evaluate((el) =>
    (el.tagName === 'CANVAS' ? [el] : Array.from(el.querySelectorAll('canvas'))).map((c) => c.toDataURL()).join('|'));
  await check('Brody: the projection checkbox changes the drawn picture (alone: the keys\' component along 1 goes to 0)', async () => {
    await brody(1, false, false);
    const off = await pixels('#brody');
    const r = await brody(1, true, false);
    const on = await pixels('#brody');
    assert.notEqual(on, off, 'ticking "projection" (m = 1, no scaling) left every canvas of the section unchanged');
    const along = (await page.getAttribute('#brody-result', 'data-along') || '').split(',').map(Number);
    assert.equal(along.length, 4, 'no data-along on #brody-result');
    assert.ok(along.every((a) => Math.abs(a) < 1e-12), `with projection the components along 1 are ${along}`);
    assert.equal(r.selectable, '1111');
    const plain = await brody(1, false, false);
    const alongOff = (await page.getAttribute('#brody-result', 'data-along')).split(',').map(Number);
    // brody.hpp: offsets c = (0.6, -0.4, 0.3, -0.7) along 1 = (1, 1, 1), i.e. c sqrt 3 along 1 / sqrt 3.
    [0.6, -0.4, 0.3, -0.7].forEach((c, j) => assert.ok(Math.abs(alongOff[j] - c * Math.sqrt(3)) < 1e-12, `key ${j + 1}: ${alongOff[j]}`));
    assert.equal(plain.selectable, '1111');
  });
  await brody(3, false, false);
  await page.locator('#brody').screenshot({ path: path.join(shots, 'brody-m3.png') });

  // Figure 1 computes in a Web Worker: a request (Run, a changed input, a click on the circle)
  // numbers itself in data-request; it is over when data-state is no longer "running". (A page
  // from before the worker has no data-request: it computed before the action returned.)
  const fig1Request = (p = page) => p.evaluate(() => document.getElementById('fig1-result').dataset.request);
  const fig1Settled = (before, p = page) => p.waitForFunction((b) => {
    const d = document.getElementById('fig1-result').dataset;
    return d.request === undefined || (d.request !== b && d.state !== 'running');
  }, before, { timeout: waitMs });
  const fig1Do = async (action, p = page) => {
    const before = await fig1Request(p);
    await action();
    await fig1Settled(before, p);
  };
  await page.waitForFunction(() => document.getElementById('fig1-result').dataset.state !== 'running', null, { timeout: waitMs });
  const endState = async () => {
    const d = await page.locator('#fig1-result').evaluate((el) => ({ ...el.dataset }));
    return { x: Number(d.x1), y: Number(d.y1), at: d.equilibrium };
  };
  const near = (s, e, tol = 1e-9) => Math.hypot(s.x - e[0], s.y - e[1]) < tol;

  await check('default start (190 degrees, third quadrant) ends at B', async () => {
    const s = await endState();
    assert.ok(near(s, B), `token 1 ended at (${s.x}, ${s.y}), expected B = (${B})`);
    assert.equal(s.at, 'B');
  });
  await check('basins on a 1-degree grid: B exactly on the open third-quadrant arc (docs/science/model-spec.md 5.5)', async () => {
    const basins = await page.locator('#fig1-result').getAttribute('data-basins');
    assert.equal(basins.length, 360);
    const wrong = [];
    for (let k = 0; k < 360; ++k) {
      // 180 and 270 degrees are the arc's ends ((-1, 0) the unstable boundary, (0, -1) gives a
      // zero row), where cos/sin of the rounded angle decide the side: not checked.
      if (k === 180 || k === 270) continue;
      const expected = k > 180 && k < 270 ? 'B' : 'A';
      if (basins[k] !== expected) wrong.push(`${k} deg: ${basins[k]} (expected ${expected})`);
    }
    assert.deepEqual(wrong, []);
  });
  await page.locator('#figure1').screenshot({ path: path.join(shots, 'figure1-B.png') });

  await check('typed start angle 20 degrees ends at A', async () => {
    await page.fill('#fig1-angle', '20');
    await fig1Do(() => page.dispatchEvent('#fig1-angle', 'change'));
    const s = await endState();
    assert.ok(near(s, A), `token 1 ended at (${s.x}, ${s.y}), expected A = (${A})`);
    assert.equal(s.at, 'A');
  });

  const canvas = page.locator('#fig1-canvas');
  await check('click in the third quadrant of the circle ends at B', async () => {
    await fig1Do(() => canvas.click({ position: { x: 210 - 90, y: 210 + 110 } }));
    const angle = Number(await page.inputValue('#fig1-angle'));
    assert.ok(angle < -90 && angle > -180, `clicked angle ${angle} should be in the third quadrant`);
    const s = await endState();
    assert.ok(near(s, B), `token 1 ended at (${s.x}, ${s.y}), expected B`);
  });
  await check('click in the first quadrant ends at A', async () => {
    await fig1Do(() => canvas.click({ position: { x: 210 + 120, y: 210 - 60 } }));
    const s = await endState();
    assert.ok(near(s, A), `token 1 ended at (${s.x}, ${s.y}), expected A`);
  });

  await check('W_V = identity: token 1 drifts to token 0 = A (uniform average, renormalised)', async () => {
    for (const [id, v] of [['wv00', '1'], ['wv01', '0'], ['wv10', '0'], ['wv11', '1']]) await page.fill(`#${id}`, v);
    await page.fill('#fig1-angle', '225');
    await page.fill('#fig1-steps', '2000');
    await fig1Do(() => page.click('#fig1-run'));
    const s = await endState();
    // x1(t+1) = (x0 + x1(t)) / ||.||: the angle to x0 halves every layer, 2000 layers reach A.
    assert.ok(near(s, A, 1e-9), `token 1 ended at (${s.x}, ${s.y}), expected A`);
  });

  await check('W_V = identity, norm none, one layer: token 1 = (x0 + x1) / 2 exactly', async () => {
    await fig1Do(() => page.selectOption('#fig1-norm', '0'));
    await page.fill('#fig1-steps', '1');
    await page.fill('#fig1-angle', '0');
    await fig1Do(() => page.click('#fig1-run'));
    const s = await endState();
    assert.ok(Math.abs(s.x - 0.5) < 1e-15 && Math.abs(s.y - 0.5) < 1e-15, `got (${s.x}, ${s.y}), expected (0.5, 0.5)`);
  });

  await check('bad W_V entry gives a message naming the input, and the plot shows it instead of the trajectories', async () => {
    const before = await pixels('#figure1');
    await page.fill('#wv01', '');
    await fig1Do(() => page.click('#fig1-run'));
    const text = await page.textContent('#fig1-result');
    assert.match(text, /wv01/);
    assert.notEqual(await pixels('#figure1'), before, 'the old trajectories are still drawn under the error');
    const d = await page.locator('#fig1-result').evaluate((el) => ({ ...el.dataset }));
    assert.deepEqual([d.x1, d.y1, d.basins], [undefined, undefined, undefined], `the previous numbers stay under the error: ${JSON.stringify(d)}`);
  });

  // Restore the default Figure 1 view for the full-page screenshot.
  for (const [id, v] of [['wv00', '0.5'], ['wv01', '1'], ['wv10', '0'], ['wv11', '1'], ['fig1-steps', '200'], ['fig1-angle', '190']]) {
    await page.fill(`#${id}`, v);
  }
  await page.selectOption('#fig1-norm', '1');
  await fig1Do(() => page.click('#fig1-run'));

  // Figure 1 in its Web Worker: the same numbers as the page before it, off the main thread,
  // with progress, Cancel, and no stale result.
  // Sets Figure 1's inputs without events (no change event starts a request of its own).
  const setFig1 = (p, wv, norm, angle, steps) => p.evaluate(([wv, norm, angle, steps]) => {
    ['wv00', 'wv01', 'wv10', 'wv11'].forEach((id, i) => { document.getElementById(id).value = wv[i]; });
    document.getElementById('fig1-norm').value = norm;
    document.getElementById('fig1-angle').value = angle;
    document.getElementById('fig1-steps').value = steps;
  }, [wv, norm, angle, steps]);
  const fig1Data = (p = page) => p.locator('#fig1-result').evaluate((el) => ({ ...el.dataset, text: el.textContent }));
  // Run lengths: 'A181 B90 A89' is 181 A, 90 B, 89 A ('-': neither).
  const unRle = (r) => r.split(' ').map((t) => t[0].repeat(Number(t.slice(1)))).join('');
  const DEFAULT_WV = ['0.5', '1', '0', '1'];
  // Recorded from the page before the worker (commit aa3d89b, its Figure 1 on the main thread).
  const GOLDEN = [
    [DEFAULT_WV, '1', '190', '200', '-0.6000000000000001', '-0.8', 'A181 B90 A89'],
    [DEFAULT_WV, '1', '20', '200', '2.7775528129901104e-121', '1', 'A181 B90 A89'],
    [DEFAULT_WV, '1', '190', '0', '-0.984807753012208', '-0.17364817766693047', '-90 A1 -269'],
    [DEFAULT_WV, '1', '270', '1', '-0.3822380292301632', '-0.9240638987701234', '-90 A1 -269'],
    [DEFAULT_WV, '0', '-135.5', '200', '-2.762127922657128e-121', '1', 'A360'],
    [['2', '-1', '0.5', '1.5'], '1', '190', '2000', '0.1356641348767966', '0.9907548851800481', '-360'],
    [['0.7', '0.8', '0.2', '0.9'], '0', '190', '2000', '4.0978277346080266e+166', '1.049680215999123e+167', '-360'],
    [DEFAULT_WV, '1', '190', '100000', '-0.6000000000000001', '-0.8', 'A181 B90 A89'],
  ];
  await check('Figure 1: token 1\'s end and the basins are those of the page before the worker (8 settings, as text)', async () => {
    const wrong = [];
    for (const [wv, norm, angle, steps, x1, y1, basins] of GOLDEN) {
      await setFig1(page, wv, norm, angle, steps);
      await fig1Do(() => page.click('#fig1-run'));
      const d = await fig1Data();
      const got = [d.x1, d.y1, d.basins], want = [x1, y1, unRle(basins)];
      if (JSON.stringify(got) !== JSON.stringify(want)) wrong.push(`W_V ${wv}, norm ${norm}, ${angle} deg, ${steps} layers: ${JSON.stringify(got)}`);
    }
    assert.deepEqual(wrong, []);
  });
  await check('Figure 1: the worker\'s trajectory and basins equal the engine called in one piece on the page, bit for bit', async () => {
    const wrong = [];
    for (const [wv, norm, angle, steps] of GOLDEN) {
      await setFig1(page, wv, norm, angle, steps);
      await fig1Do(() => page.click('#fig1-run'));
      // The page's computation before the worker (runFigure1 and basins() of aa3d89b).
      const diff = await page.evaluate(() => {
        const wv = [num('wv00'), num('wv01'), num('wv10'), num('wv11')], norm = int('fig1-norm', 0, 1);
        const steps = int('fig1-steps', 0, 100000), theta = (num('fig1-angle') * Math.PI) / 180;
        const one = (x0, s) => callEngine(engine._rc_figure1, [wv, x0], 4 * (s + 1), (p, o) => [p[0], p[1], norm, s, o]);
        const traj = one([0, 1, Math.cos(theta), Math.sin(theta)], steps);
        const ends = [], bs = Math.min(steps, 500);
        for (let k = 0; k < 360; ++k) {
          const th = (2 * Math.PI * k) / 360, t = one([0, 1, Math.cos(th), Math.sin(th)], bs);
          let at = '';
          for (const [name, e] of Object.entries(EQUILIBRIA)) if (Math.hypot(t[4 * bs + 2] - e[0], t[4 * bs + 3] - e[1]) < 1e-6) at = name;
          ends.push(at);
        }
        const last = fig1.last;
        if (!last) return 'no fig1.last on the page';
        if (last.traj.length !== traj.length) return `trajectory length ${last.traj.length}, expected ${traj.length}`;
        for (let i = 0; i < traj.length; ++i) if (!Object.is(last.traj[i], traj[i])) return `trajectory value ${i}: ${last.traj[i]}, one call ${traj[i]}`;
        if (last.ends.join(',') !== ends.join(',')) return 'basins differ';
        return '';
      });
      if (diff) wrong.push(`W_V ${wv}, norm ${norm}, ${angle} deg, ${steps} layers: ${diff}`);
    }
    assert.deepEqual(wrong, []);
  });
  // A 10 ms timer and requestAnimationFrame on the page record the longest gap between their
  // calls, and the progress texts shown, while `action` and the computation it starts last.
  const fig1Meter = async (p, action) => {
    await p.evaluate(() => {
      const m = { last: performance.now(), max: 0, ticks: 0, rafLast: performance.now(), rafMax: 0, texts: [] };
      window.fig1Meter = m;
      m.timer = setInterval(() => { const n = performance.now(); m.max = Math.max(m.max, n - m.last); m.last = n; m.ticks += 1; }, 10);
      const frame = () => { const n = performance.now(); m.rafMax = Math.max(m.rafMax, n - m.rafLast); m.rafLast = n; m.raf = requestAnimationFrame(frame); };
      m.raf = requestAnimationFrame(frame);
      const el = document.getElementById('fig1-progress-text');
      m.observer = new MutationObserver(() => m.texts.push(el.textContent));
      if (el) m.observer.observe(el, { childList: true, characterData: true, subtree: true });  // (a page before the worker has none)
    });
    const t0 = Date.now();
    await fig1Do(action, p);
    const ms = Date.now() - t0;
    await p.waitForTimeout(50);  // the frame after the drawing
    const m = await p.evaluate(() => {
      const m = window.fig1Meter;
      clearInterval(m.timer); cancelAnimationFrame(m.raf); m.observer.disconnect();
      return { max: m.max, rafMax: m.rafMax, ticks: m.ticks, texts: m.texts };
    });
    return { ms, ...m };
  };
  await check('Figure 1 at its largest (100000 layers, basins 360 x 500 layers) computes off the main thread: timer and frame gaps < 200 ms, progress shown', async () => {
    await setFig1(page, DEFAULT_WV, '1', '190', '100000');
    const m = await fig1Meter(page, () => page.click('#fig1-run'));
    console.log(`     Figure 1 (${await page.evaluate(() => document.body.dataset.figure1Mode)}), 100000 layers: ${m.ms} ms, ` +
      `longest gap between 10 ms timer ticks ${m.max.toFixed(0)} ms, between animation frames ${m.rafMax.toFixed(0)} ms (${m.ticks} ticks)`);
    assert.ok(m.max < 200 && m.rafMax < 200, `the main thread was blocked for ${m.max.toFixed(0)} ms (timer), ${m.rafMax.toFixed(0)} ms (frames)`);
    assert.equal(await page.evaluate(() => document.body.dataset.figure1Mode), 'worker', 'Figure 1 does not compute in a Web Worker');
    const d = await fig1Data();
    assert.equal(d.state, 'done', d.text);
    assert.equal(d.equilibrium, 'B');
    assert.ok(m.texts.some((t) => /^trajectory: layer \d+ of 100000$/.test(t)), `progress texts: ${JSON.stringify(m.texts)}`);
    assert.ok(m.texts.some((t) => /^basins: start angle \d+ of 360$/.test(t)), `progress texts: ${JSON.stringify(m.texts)}`);
  });
  // Starts a large Figure 1 computation and waits until it has made progress.
  const fig1StartLarge = async (p) => {
    await setFig1(p, DEFAULT_WV, '1', '190', '100000');
    await p.click('#fig1-run');
    await p.waitForFunction(() => { const d = document.getElementById('fig1-result').dataset; return d.state === 'running' && Number(d.done) > 0; }, null, { timeout: waitMs });
  };
  const fig1Cancel = async (p) => {
    await setFig1(p, DEFAULT_WV, '1', '20', '200');
    await fig1Do(() => p.click('#fig1-run'), p);
    const prev = await fig1Data(p), prevPixels = await pixels('#fig1-canvas');
    await fig1StartLarge(p);
    const t0 = Date.now();
    await p.click('#fig1-cancel');
    await p.waitForSelector('#fig1-result[data-state="cancelled"]', { timeout: 2000 });
    const ms = Date.now() - t0;
    const done = (await fig1Data(p)).done;
    assert.ok(Number(done) < 100000 + 360 * 501, `cancelled after ${done} layers`);
    assert.match(await p.textContent('#fig1-progress-text'), /cancelled after \d+ of 280360 layers/);
    await p.waitForTimeout(1500);
    const after = await fig1Data(p);
    assert.equal(after.done, done, 'progress moved after Cancel');
    assert.equal(after.state, 'cancelled');
    assert.deepEqual([after.x1, after.y1, after.basins, after.text], [prev.x1, prev.y1, prev.basins, prev.text], 'the result changed after Cancel');
    if (p === page) assert.equal(await pixels('#fig1-canvas'), prevPixels, 'the plot changed after Cancel');
    assert.ok(await p.locator('#fig1-cancel').isDisabled(), 'Cancel still enabled');
    assert.ok(ms < 1000, `Cancel took ${ms} ms`);
    // The next request works.
    await setFig1(p, DEFAULT_WV, '1', '190', '200');
    await fig1Do(() => p.click('#fig1-run'), p);
    assert.equal((await fig1Data(p)).equilibrium, 'B');
  };
  await check('Figure 1: Cancel stops a large computation at once, the previous result and plot stay, the next run works', async () => {
    await fig1Cancel(page);
  });
  await check('Figure 1: a new request cancels the running one, whose result never lands', async () => {
    await fig1StartLarge(page);  // 190 degrees: B
    await page.fill('#fig1-angle', '20');
    await page.fill('#fig1-steps', '200');
    await fig1Do(() => page.click('#fig1-run'));
    const d = await fig1Data();
    assert.deepEqual([d.state, d.equilibrium], ['done', 'A'], d.text);
    await page.waitForTimeout(2500);  // longer than the large computation takes
    const later = await fig1Data();
    assert.deepEqual([later.state, later.equilibrium, later.request, later.x1], ['done', 'A', d.request, d.x1], `a stale result landed: ${later.text}`);
  });
  await check('Figure 1 on the page in slices (?worker=0): the same numbers, timer and frame gaps < 200 ms, Cancel', async () => {
    const slow = await context.newPage();
    try {
      slow.on('pageerror', (e) => errors.push(String(e)));
      await slow.goto(`${pathToFileURL(path.join(web, 'index.html')).href}?worker=0`);
      await slow.waitForSelector('#status[data-ready="1"]', { timeout: 30000 });
      assert.equal(await slow.evaluate(() => document.body.dataset.figure1Mode), 'main');
      await slow.waitForFunction(() => document.getElementById('fig1-result').dataset.state !== 'running', null, { timeout: waitMs });
      for (const i of [0, 5, 6]) {
        const [wv, norm, angle, steps, x1, y1, basins] = GOLDEN[i];
        await setFig1(slow, wv, norm, angle, steps);
        await fig1Do(() => slow.click('#fig1-run'), slow);
        const d = await fig1Data(slow);
        assert.deepEqual([d.x1, d.y1, d.basins], [x1, y1, unRle(basins)], `${angle} deg, ${steps} layers`);
      }
      const [wv, norm, angle, steps, x1, y1, basins] = GOLDEN[7];
      await setFig1(slow, wv, norm, angle, steps);
      const m = await fig1Meter(slow, () => slow.click('#fig1-run'));
      console.log(`     Figure 1 (on the page in slices), 100000 layers: ${m.ms} ms, longest gap between 10 ms timer ticks ${m.max.toFixed(0)} ms, ` +
        `between animation frames ${m.rafMax.toFixed(0)} ms`);
      const d = await fig1Data(slow);
      assert.deepEqual([d.x1, d.y1, d.basins], [x1, y1, unRle(basins)], '100000 layers');
      assert.ok(m.texts.some((t) => /^basins: start angle \d+ of 360$/.test(t)), `progress texts: ${JSON.stringify(m.texts)}`);
      assert.ok(m.max < 200 && m.rafMax < 200, `the main thread was blocked for ${m.max.toFixed(0)} ms (timer), ${m.rafMax.toFixed(0)} ms (frames)`);
      await fig1Cancel(slow);
    } finally {
      await slow.close();
    }
  });
  await setFig1(page, DEFAULT_WV, '1', '190', '200');
  await fig1Do(() => page.click('#fig1-run'));

  // Clicks Run and waits for the run to end (done, error or cancelled).
  const finished = () => page.waitForSelector('#col-result[data-state="done"], #col-result[data-state="error"], #col-result[data-state="cancelled"]', { timeout: waitMs });
  const result = () => page.locator('#col-result').evaluate((el) => ({ ...el.dataset, text: el.textContent, cls: el.className }));
  const collapse = async () => {
    await page.click('#col-run');
    await finished();
    const d = await result();
    assert.ok(!d.cls.includes('error'), d.text);
    return { mu0: Number(d.muEnd !== undefined ? d.mu0 : NaN), muEnd: Number(d.muEnd), relEnd: Number(d.relEnd), text: d.text, mu: d.mu };
  };
  await finished().catch(() => {});  // the run the page starts when it loads
  await check('complete mask, no normalisation: mu falls by more than 1e6 in 30 layers', async () => {
    const r = await collapse();
    assert.ok(r.mu0 > 1, `mu(0) = ${r.mu0}`);
    assert.ok(r.muEnd < 1e-6 * r.mu0, `mu: ${r.mu0} -> ${r.muEnd}`);
  });
  await page.locator('#collapse').screenshot({ path: path.join(shots, 'collapse-complete.png') });

  await check('complete mask, sphere, d = 64, N = 32: mu_rel falls below 1e-6', async () => {
    await page.fill('#col-d', '64');
    await page.fill('#col-dqk', '64');
    await page.fill('#col-n', '32');
    await page.selectOption('#col-norm', '1');
    await page.fill('#col-depth', '60');
    const r = await collapse();
    assert.ok(r.relEnd < 1e-6, `mu_rel(60) = ${r.relEnd}`);
  });

  await check('d = 65 is refused with a message naming col-d', async () => {
    await page.fill('#col-d', '65');
    await page.click('#col-run');
    assert.match(await page.textContent('#col-result'), /col-d.*\[1, 64\]/);
  });
  const defaults = async () => {
    await page.selectOption('#col-mask', '2');  // window is disabled with the complete mask
    for (const [id, v] of [['col-n', '16'], ['col-d', '8'], ['col-dk', 'auto'], ['col-dqk', 'auto'], ['col-heads', '1'],
      ['col-window', '2'], ['col-depth', '30'], ['col-trials', '4'], ['col-seed', '1']]) {
      if (await page.locator(`#${id}`).count() === 0) continue;  // an older page without that field
      await page.fill(`#${id}`, v);
    }
    await page.selectOption('#col-mask', '0');
    await page.selectOption('#col-norm', '0');
    await page.setChecked('#col-logx', true);
  };

  // d_QK is a temperature (model.d_qk), a double: Wu et al.'s 1/64 as a fraction or a decimal.
  await check('d_QK = 1/64 gives the same mu as 0.015625 (bit for bit) and differs from 16', async () => {
    await defaults();
    await page.fill('#col-dqk', '1/64');
    const frac = await collapse();
    assert.match(await page.textContent('#col-legend'), /d_QK 1\/64/);
    await page.fill('#col-dqk', '0.015625');
    const dec = await collapse();
    await page.fill('#col-dqk', '16');
    const sixteen = await collapse();
    assert.ok(frac.mu && frac.mu.length > 0, 'no mu on #col-result');
    assert.equal(frac.mu, dec.mu, '1/64 and 0.015625 give different mu');
    assert.notEqual(frac.mu, sixteen.mu, '1/64 and 16 give the same mu');
  });
  // The page's mu against the native `rcsim run` with the same keys and seed (d_QK = 1/64 as
  // model.d_qk): |page - native| <= 1e-9 native + 1e-14 mu(0). mu is a difference of nearly equal
  // tokens once they collapse, so its round-off is relative to ||X|| ~ mu(0), not to mu; there the
  // last bits, which -march changes, decide.
  await check('mu with d_QK = 1/64 equals `rcsim run --model.d_qk=1/64` (native, same seed) to 1e-9 relative + round-off', async () => {
    assert.ok(fs.existsSync(native), `no native rcsim at ${native} (build it, or set RCSIM_BIN)`);
    await defaults();
    await page.fill('#col-dqk', '1/64');
    await page.fill('#col-trials', '2');
    const r = await collapse();
    const pageMu = r.mu.split(';').map((t) => t.split(',').map(Number));
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'rcsim-run-'));
    let nativeMu;
    try {
      const file = path.join(out, 'run.h5');
      execFileSync(native, ['run', '--model.tokens=16', '--model.dim=8', '--model.d_qk=1/64', '--model.layers=30',
        '--run.trials=2', '--run.seed=1', `--output.file=${file}`, '--quiet'], { encoding: 'utf8' });
      nativeMu = JSON.parse(execFileSync('/usr/bin/python3', ['-c',
        'import h5py, json, sys; print(json.dumps(h5py.File(sys.argv[1], "r")["metrics/mu"][()].tolist()))', file], { encoding: 'utf8' }));
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
    assert.equal(nativeMu.length, 2);
    for (let t = 0; t < 2; ++t) {
      assert.equal(nativeMu[t].length, 31);
      for (let l = 0; l <= 30; ++l) {
        const tol = 1e-9 * Math.abs(nativeMu[t][l]) + 1e-14 * nativeMu[t][0];
        assert.ok(Math.abs(pageMu[t][l] - nativeMu[t][l]) <= tol, `trial ${t}, layer ${l}: page ${pageMu[t][l]}, rcsim run ${nativeMu[t][l]}`);
      }
    }
  });
  await check('an invalid d_QK (1/0, -2, abc) is named next to the field, and the plot shows the error instead of the old curves', async () => {
    for (const bad of ['abc', '1/0', '-2', '0']) {
      await defaults();
      await collapse();
      const before = await pixels('#collapse');
      await page.fill('#col-dqk', bad);
      await page.click('#col-run');
      const d = await result();
      assert.equal(d.state, 'error', `d_QK "${bad}": state ${d.state}`);
      const msg = await page.textContent('#col-dqk-msg');
      assert.match(msg, /allowed: .*1\/64/, `d_QK "${bad}": message next to the field: "${msg}"`);
      assert.ok(await page.locator('#col-dqk-msg').isVisible(), 'the message next to d_QK is not visible');
      assert.equal(await page.locator('#col-legend li').count(), 0, 'the legend still lists the old run');
      const after = await pixels('#collapse');
      assert.notEqual(after, before, 'the plot did not change');
      // The canvas shows the error: red pixels, and none of the old run's blue curve.
      const colours = await page.locator('#col-canvas').evaluate((c) => {
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let red = 0, blue = 0;
        for (let i = 0; i < px.length; i += 4) {
          if (px[i + 3] < 128) continue;
          if (px[i] > 150 && px[i + 1] < 60 && px[i + 2] < 60) red += 1;
          if (px[i] < 60 && px[i + 1] < 100 && px[i + 2] > 150) blue += 1;
        }
        return { red, blue };
      });
      assert.ok(colours.red > 50 && colours.blue === 0, `canvas after the error: ${JSON.stringify(colours)}`);
    }
    await page.fill('#col-dqk', '1/64');
    await collapse();
    assert.equal(await page.textContent('#col-dqk-msg'), '', 'the message stays after a valid d_QK');
  });
  await check('a computation error (the engine refuses) replaces the plot too', async () => {
    await defaults();
    await collapse();
    const before = await pixels('#collapse');
    // The engine's own refusal (the page checks N, d, ... itself; force a bad call by hand).
    const d = await page.evaluate(async () => {
      const res = collapseRunner.run([0, 8, 8, 8, 1, 0, 0, 0, 3, 1, 1], () => {});
      try { await res; return 'resolved'; } catch (e) { return String(e.message); }
    });
    assert.match(d, /refused/);
    // The page path: an error thrown by the runner goes through showCollapseError.
    await page.evaluate(() => showCollapseError('the computation failed: test'));
    assert.notEqual(await pixels('#collapse'), before);
    assert.equal(await page.locator('#col-legend li').count(), 0);
  });

  await check('overlay: Keep, then a second run: two legend entries naming each run\'s settings; Clear: one', async () => {
    await defaults();
    await page.fill('#col-dqk', '1/64');
    await collapse();
    const one = await pixels('#col-canvas');
    await page.click('#col-keep');
    await page.fill('#col-dqk', '16');
    await page.fill('#col-n', '24');
    await collapse();
    const items = await page.locator('#col-legend li').allTextContents();
    assert.equal(items.length, 2, `legend: ${JSON.stringify(items)}`);
    assert.match(items[0], /N 16,.*d_QK 1\/64.*\(kept\)/);
    assert.match(items[1], /N 24,.*d_QK 16,/);
    const colours = await page.locator('#col-legend .swatch').evaluateAll((els) => els.map((e) => getComputedStyle(e).backgroundColor));
    assert.notEqual(colours[0], colours[1], 'both runs have the same colour');
    assert.notEqual(await pixels('#col-canvas'), one);
    await page.locator('#collapse').screenshot({ path: path.join(shots, 'collapse-overlay.png') });
    await page.click('#col-clear');
    assert.equal(await page.locator('#col-legend li').count(), 1);
  });

  // Responsiveness: N = 256, d = 64, 300 layers (2.3 s in one call before the Worker). A timer
  // every 10 ms records the longest gap between its ticks while the run lasts; a button of another
  // section is clicked during the run and must answer before the run ends.
  const longRun = async () => {
    await defaults();
    for (const [id, v] of [['col-n', '256'], ['col-d', '64'], ['col-depth', '300'], ['col-trials', '4']]) await page.fill(`#${id}`, v);
  };
  const startGapMeter = () => page.evaluate(() => {
    window.gapMeter = { last: performance.now(), max: 0, ticks: 0 };
    window.gapTimer = setInterval(() => {
      const now = performance.now();
      window.gapMeter.max = Math.max(window.gapMeter.max, now - window.gapMeter.last);
      window.gapMeter.last = now;
      window.gapMeter.ticks += 1;
    }, 10);
  });
  const stopGapMeter = () => page.evaluate(() => { clearInterval(window.gapTimer); return window.gapMeter; });
  const responsive = async (label) => {
    await longRun();
    await startGapMeter();
    const t0 = Date.now();
    await page.click('#col-run', { noWaitAfter: true, timeout: waitMs });
    // While it computes: progress moves, and Figure 1's Run answers (in its own worker).
    await page.waitForFunction(() => Number(document.getElementById('col-result').dataset.done) > 0, null, { timeout: waitMs });
    const gapsBefore = await page.evaluate(() => ({ ...window.gapMeter }));
    await page.fill('#fig1-angle', '20');
    const tClick = Date.now();
    await fig1Do(() => page.click('#fig1-run', { timeout: waitMs }));
    const clickMs = Date.now() - tClick;
    const whileRunning = await page.evaluate(() => ({
      state: document.getElementById('col-result').dataset.state,
      at: document.getElementById('fig1-result').dataset.equilibrium,
      progress: document.getElementById('col-progress-text').textContent,
    }));
    await finished();
    const ms = Date.now() - t0;
    const gapsAfter = await stopGapMeter();
    const gaps = { max: Math.max(gapsBefore.max, gapsAfter.max), ticks: gapsAfter.ticks };
    const r = await result();
    console.log(`     ${label}: ${ms} ms, longest gap between 10 ms timer ticks ${gaps.max.toFixed(0)} ms ` +
      `(${gapsBefore.max.toFixed(0)} ms before Figure 1's click; ${gaps.ticks} ticks), Figure 1's click ${clickMs} ms, ${r.text.split('\n')[0]}`);
    await page.fill('#fig1-angle', '190');
    await fig1Do(() => page.click('#fig1-run'));
    return { whileRunning, gaps, r };
  };
  await check('N = 256, d = 64, 300 layers: the page answers while it computes (timer gaps < 200 ms, a click in Figure 1)', async () => {
    const { whileRunning, gaps, r } = await responsive(await page.evaluate(() => document.body.dataset.collapseMode));
    assert.equal(r.state, 'done', r.text);
    assert.equal(whileRunning.state, 'running', 'the run ended before the click was answered');
    assert.equal(whileRunning.at, 'A', 'Figure 1 did not answer during the run');
    assert.match(whileRunning.progress, /trial \d of 4, layer \d+ of 300/);
    assert.ok(gaps.max < 200, `the main thread was blocked for ${gaps.max.toFixed(0)} ms`);
  });
  await check('the page uses a Web Worker when opened as file://', async () => {
    assert.equal(await page.evaluate(() => document.body.dataset.collapseMode), 'worker');
  });
  await check('Cancel stops a long run at once; the next run works', async () => {
    await longRun();
    await page.click('#col-run');
    await page.waitForFunction(() => Number(document.getElementById('col-result').dataset.done) > 0, null, { timeout: waitMs });
    const t0 = Date.now();
    await page.click('#col-cancel');
    await page.waitForSelector('#col-result[data-state="cancelled"]', { timeout: 2000 });
    const ms = Date.now() - t0;
    const done = Number(await page.getAttribute('#col-result', 'data-done'));
    assert.ok(done < 4 * 301, `cancelled after ${done} values of ${4 * 301}`);
    assert.match(await page.textContent('#col-progress-text'), /cancelled after \d+ of 1204/);
    await page.waitForTimeout(500);
    assert.equal(Number(await page.getAttribute('#col-result', 'data-done')), done, 'progress moved after Cancel');
    assert.ok(ms < 1000, `Cancel took ${ms} ms`);
    await defaults();
    const r = await collapse();
    assert.ok(r.muEnd < 1e-6 * r.mu0, r.text);
  });
  await check('an invalid d_QK entered during a long run stops it and leaves the error (not "cancelled") on the page', async () => {
    await longRun();
    await page.click('#col-run');
    await page.waitForFunction(() => Number(document.getElementById('col-result').dataset.done) > 0, null, { timeout: waitMs });
    await page.fill('#col-dqk', 'abc');
    await page.click('#col-run');
    await page.waitForTimeout(500);
    const d = await result();
    assert.equal(d.state, 'error', `state ${d.state}: ${d.text}`);
    assert.match(d.text, /col-dqk/);
    assert.equal(await page.locator('#col-cancel').isDisabled(), true, 'Cancel still enabled');
  });
  await check('the same mu with the computation on the page in slices (?worker=0), which also stays responsive', async () => {
    await defaults();
    await page.fill('#col-dqk', '1/64');
    const inWorker = await collapse();
    const slow = await context.newPage();
    try {
      slow.on('pageerror', (e) => errors.push(String(e)));
      await slow.goto(`${pathToFileURL(path.join(web, 'index.html')).href}?worker=0`);
      await slow.waitForSelector('#status[data-ready="1"]', { timeout: 30000 });
      assert.equal(await slow.evaluate(() => document.body.dataset.collapseMode), 'main');
      await slow.fill('#col-dqk', '1/64');
      await slow.click('#col-run');
      await slow.waitForSelector('#col-result[data-state="done"]', { timeout: waitMs });
      assert.equal(await slow.getAttribute('#col-result', 'data-mu'), inWorker.mu);
      // responsiveness and cancel on the page itself
      for (const [id, v] of [['col-n', '256'], ['col-d', '64'], ['col-depth', '300'], ['col-dqk', 'auto']]) await slow.fill(`#${id}`, v);
      await slow.evaluate(() => {
        window.gapMeter = { last: performance.now(), max: 0 };
        window.gapTimer = setInterval(() => { const now = performance.now(); window.gapMeter.max = Math.max(window.gapMeter.max, now - window.gapMeter.last); window.gapMeter.last = now; }, 10);
      });
      await slow.click('#col-run');
      await slow.waitForFunction(() => Number(document.getElementById('col-result').dataset.done) > 300, null, { timeout: waitMs });
      await slow.click('#col-cancel');
      await slow.waitForSelector('#col-result[data-state="cancelled"]', { timeout: 2000 });
      const gap = await slow.evaluate(() => { clearInterval(window.gapTimer); return window.gapMeter.max; });
      console.log(`     on the page in slices: longest gap between 10 ms timer ticks ${gap.toFixed(0)} ms before Cancel`);
      assert.ok(gap < 200, `the main thread was blocked for ${gap.toFixed(0)} ms`);
    } finally {
      await slow.close();
    }
  });

  // Every control of the collapse explorer changes what is drawn (from the defaults, one at a time).
  await check('every collapse control changes the plot; window is disabled unless the mask is a sliding window', async () => {
    const controls = [['col-n', '24'], ['col-d', '6'], ['col-dk', '3'], ['col-dqk', '1/8'], ['col-heads', '2'],
      ['col-mask', '1'], ['col-norm', '3'], ['col-depth', '20'], ['col-trials', '2'], ['col-seed', '7']];
    const unchanged = [];
    for (const [id, v] of controls) {
      await defaults();
      await collapse();
      const before = await pixels('#col-canvas');
      if (id === 'col-mask' || id === 'col-norm') await page.selectOption(`#${id}`, v); else await page.fill(`#${id}`, v);
      await collapse();
      if ((await pixels('#col-canvas')) === before) unchanged.push(id);
    }
    await defaults();
    assert.ok(await page.locator('#col-window').isDisabled(), 'window enabled with the complete mask');
    await page.selectOption('#col-mask', '2');
    assert.ok(!(await page.locator('#col-window').isDisabled()), 'window disabled with sliding_window');
    await collapse();
    const before = await pixels('#col-canvas');
    await page.fill('#col-window', '5');
    await collapse();
    if ((await pixels('#col-canvas')) === before) unchanged.push('col-window (sliding_window)');
    await defaults();
    await collapse();
    const lin = await pixels('#col-canvas');
    await page.setChecked('#col-logx', false);
    if ((await pixels('#col-canvas')) === lin) unchanged.push('col-logx');
    assert.deepEqual(unchanged, []);
  });
  await check('every Selectable keys and Figure 1 control changes the picture', async () => {
    const unchanged = [];
    await brody(1, false, false);
    for (const [id, set] of [['brody-m', () => page.locator('#brody-m').fill('2')],
      ['brody-theta', () => page.locator('#brody-theta').fill('200')],
      ['brody-proj', () => page.setChecked('#brody-proj', true)], ['brody-scale', () => page.setChecked('#brody-scale', true)]]) {
      await brody(1, false, false);
      await page.locator('#brody-theta').fill('75');
      const before = await pixels('#brody');
      await set();
      if ((await pixels('#brody')) === before) unchanged.push(id);
    }
    await brody(3, false, false);
    await page.locator('#brody-theta').fill('75');
    for (const [id, v] of [['wv00', '0.7'], ['wv01', '0.8'], ['wv10', '0.2'], ['wv11', '0.9'], ['fig1-norm', '0'], ['fig1-angle', '100'], ['fig1-steps', '5']]) {
      const before = await pixels('#figure1');
      const old = await page.inputValue(`#${id}`);
      if (id === 'fig1-norm') await fig1Do(() => page.selectOption('#fig1-norm', v)); else { await page.fill(`#${id}`, v); await fig1Do(() => page.dispatchEvent(`#${id}`, 'change')); }
      if ((await pixels('#figure1')) === before) unchanged.push(id);
      if (id === 'fig1-norm') await fig1Do(() => page.selectOption('#fig1-norm', old)); else { await page.fill(`#${id}`, old); await fig1Do(() => page.dispatchEvent(`#${id}`, 'change')); }
    }
    assert.deepEqual(unchanged, []);
  });
  await defaults().then(collapse).catch((e) => console.log(`     (could not restore the defaults: ${e.message.split('\n')[0]})`));

  await page.screenshot({ path: path.join(shots, 'page.png'), fullPage: true });
  await check('without web/engine.js (a fresh clone) the page says how to build it, not "Loading" for ever', async () => {
    const bare = fs.mkdtempSync(path.join(os.tmpdir(), 'rcsim-bare-page-'));
    try {
      for (const f of ['index.html', 'app.js']) fs.copyFileSync(path.join(web, f), path.join(bare, f));
      const p = await context.newPage();
      const bareErrors = [];
      p.on('pageerror', (e) => bareErrors.push(String(e)));
      await p.goto(pathToFileURL(path.join(bare, 'index.html')).href);
      await p.waitForSelector('#status[data-missing="1"]', { timeout: 10000 });
      const text = await p.locator('#status').textContent();
      assert.match(text, /engine\.js is missing.*bash scripts\/build-web\.sh/);
      assert.ok(await p.locator('#status').isVisible(), 'the line is not visible');
      assert.deepEqual(bareErrors, []);
      await p.close();
    } finally {
      fs.rmSync(bare, { recursive: true, force: true });
    }
  });
  await check('no JavaScript errors on the page', async () => {
    assert.deepEqual(errors, []);
  });
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
console.log(failures === 0 ? 'all browser checks passed' : `${failures} browser check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
