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
const web = path.resolve(here, '..');
const shots = path.resolve(web, '..', 'docs', 'web');
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
  const native = process.env.RCSIM_BIN || path.resolve(web, '..', 'build', 'sim', 'rcsim');
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
  await brody(3, false, false);
  await page.screenshot({ path: path.join(shots, 'brody-m3.png'), clip: await page.locator('#brody').boundingBox() });

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
  await page.screenshot({ path: path.join(shots, 'figure1-B.png'), clip: await page.locator('#figure1').boundingBox() });

  await check('typed start angle 20 degrees ends at A', async () => {
    await page.fill('#fig1-angle', '20');
    await page.dispatchEvent('#fig1-angle', 'change');
    const s = await endState();
    assert.ok(near(s, A), `token 1 ended at (${s.x}, ${s.y}), expected A = (${A})`);
    assert.equal(s.at, 'A');
  });

  const canvas = page.locator('#fig1-canvas');
  await check('click in the third quadrant of the circle ends at B', async () => {
    await canvas.click({ position: { x: 210 - 90, y: 210 + 110 } });
    const angle = Number(await page.inputValue('#fig1-angle'));
    assert.ok(angle < -90 && angle > -180, `clicked angle ${angle} should be in the third quadrant`);
    const s = await endState();
    assert.ok(near(s, B), `token 1 ended at (${s.x}, ${s.y}), expected B`);
  });
  await check('click in the first quadrant ends at A', async () => {
    await canvas.click({ position: { x: 210 + 120, y: 210 - 60 } });
    const s = await endState();
    assert.ok(near(s, A), `token 1 ended at (${s.x}, ${s.y}), expected A`);
  });

  await check('W_V = identity: token 1 drifts to token 0 = A (uniform average, renormalised)', async () => {
    for (const [id, v] of [['wv00', '1'], ['wv01', '0'], ['wv10', '0'], ['wv11', '1']]) await page.fill(`#${id}`, v);
    await page.fill('#fig1-angle', '225');
    await page.fill('#fig1-steps', '2000');
    await page.click('#fig1-run');
    const s = await endState();
    // x1(t+1) = (x0 + x1(t)) / ||.||: the angle to x0 halves every layer, 2000 layers reach A.
    assert.ok(near(s, A, 1e-9), `token 1 ended at (${s.x}, ${s.y}), expected A`);
  });

  await check('W_V = identity, norm none, one layer: token 1 = (x0 + x1) / 2 exactly', async () => {
    await page.selectOption('#fig1-norm', '0');
    await page.fill('#fig1-steps', '1');
    await page.fill('#fig1-angle', '0');
    await page.click('#fig1-run');
    const s = await endState();
    assert.ok(Math.abs(s.x - 0.5) < 1e-15 && Math.abs(s.y - 0.5) < 1e-15, `got (${s.x}, ${s.y}), expected (0.5, 0.5)`);
  });

  await check('bad W_V entry gives a message naming the input', async () => {
    await page.fill('#wv01', '');
    await page.click('#fig1-run');
    const text = await page.textContent('#fig1-result');
    assert.match(text, /wv01/);
  });

  // Restore the default Figure 1 view for the full-page screenshot.
  for (const [id, v] of [['wv00', '0.5'], ['wv01', '1'], ['wv10', '0'], ['wv11', '1'], ['fig1-steps', '200'], ['fig1-angle', '190']]) {
    await page.fill(`#${id}`, v);
  }
  await page.selectOption('#fig1-norm', '1');
  await page.click('#fig1-run');

  const collapse = async () => {
    await page.click('#col-run');
    const d = await page.locator('#col-result').evaluate((el) => ({ ...el.dataset, text: el.textContent, cls: el.className }));
    assert.ok(!d.cls.includes('error'), d.text);
    return { mu0: Number(d.muEnd !== undefined ? d.mu0 : NaN), muEnd: Number(d.muEnd), relEnd: Number(d.relEnd), text: d.text };
  };
  await check('complete mask, no normalisation: mu falls by more than 1e6 in 30 layers', async () => {
    const r = await collapse();
    assert.ok(r.mu0 > 1, `mu(0) = ${r.mu0}`);
    assert.ok(r.muEnd < 1e-6 * r.mu0, `mu: ${r.mu0} -> ${r.muEnd}`);
  });
  await page.screenshot({ path: path.join(shots, 'collapse-complete.png'), clip: await page.locator('#collapse').boundingBox() });

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
    await page.fill('#col-d', '8');
    await page.fill('#col-dqk', '8');
    await page.fill('#col-n', '16');
    await page.selectOption('#col-norm', '0');
    await page.fill('#col-depth', '30');
    await page.click('#col-run');
  });

  await page.screenshot({ path: path.join(shots, 'page.png'), fullPage: true });
  await check('no JavaScript errors on the page', async () => {
    assert.deepEqual(errors, []);
  });
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
console.log(failures === 0 ? 'all browser checks passed' : `${failures} browser check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
