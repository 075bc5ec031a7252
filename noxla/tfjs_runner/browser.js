// Runs TF.js graph models in headless Chromium, for noxla's tests and verify step.
// Same line protocol as runner.js, on stdin/stdout:
//   {"model": dir, "backend": "webgl"|"wasm"|"cpu"|"webgpu", "inputs": {...}, "repeats": n}
// -> {"outputs": {name: {dtype, shape, data}}, "ms": median latency, "flags": {...}} or {"error": message}.
//   {"probe": true} -> {"backends": [...], "version": "..."}
//   {"demo": dir, "backend": b, "screenshot": png?} -> the export's own index.html run on b, as a
//   user sees it: {"maxError", "ms", "rows", "env"} (and a screenshot of the page when asked).
// Model directories are served on 127.0.0.1 with the TF.js bundles from node_modules (the versions
// the converter writes for) and noxla's demo page (index.html), which does the work in the browser:
// the tests, `noxla export --verify` and a user's `noxla serve` all run the same page code.
'use strict';
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { serveJsonLines } = require('./jsonlines.js');
const puppeteer = require('puppeteer-core');

const PAGE = path.join(__dirname, 'index.html');
const MIME = { '.html': 'text/html', '.js': 'text/javascript', '.json': 'application/json',
               '.wasm': 'application/wasm', '.bin': 'application/octet-stream', '.png': 'image/png' };

// The TF.js files a page may ask for under .../tfjs/<file>.
function bundleFiles(modules) {
  const files = {};
  const add = (pkg, names) => {
    for (const name of names) {
      const p = path.join(modules, '@tensorflow', pkg, 'dist', name);
      if (fs.existsSync(p)) files[name] = p;
    }
  };
  add('tfjs', ['tf.min.js']);
  add('tfjs-backend-wasm', ['tf-backend-wasm.min.js', 'tfjs-backend-wasm.wasm', 'tfjs-backend-wasm-simd.wasm',
                            'tfjs-backend-wasm-threaded-simd.wasm']);
  add('tfjs-backend-webgpu', ['tf-backend-webgpu.min.js']);
  return files;
}

// Serves `/m/<id>/<file>` from registered model directories, `/page/index.html` (the demo page,
// which also runs the tests' requests) and `.../tfjs/<file>` from node_modules.
function startServer(modules) {
  const bundles = bundleFiles(modules);
  const dirs = [];
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    let file = null;
    const tfjs = url.match(/\/tfjs\/([^/]+)$/);
    const model = url.match(/^\/m\/(\d+)\/(.+)$/);
    if (tfjs) file = bundles[tfjs[1]] || null;
    else if (url === '/page/index.html') file = PAGE;
    else if (model && dirs[+model[1]]) {
      const candidate = path.join(dirs[+model[1]], model[2]);
      if (!path.relative(dirs[+model[1]], candidate).startsWith('..') && fs.existsSync(candidate)) file = candidate;
    }
    if (!file) {
      if (process.env.NOXLA_BROWSER_DEBUG) process.stderr.write(`404 ${req.url}\n`);
      res.writeHead(404);
      res.end();
      return;
    }
    res.writeHead(200, { 'Content-Type': MIME[path.extname(file)] || 'application/octet-stream',
                         'Cache-Control': 'no-store' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    server,
    origin: `http://127.0.0.1:${server.address().port}`,
    url(dir) {
      let id = dirs.indexOf(dir);
      if (id < 0) id = dirs.push(dir) - 1;
      return `http://127.0.0.1:${server.address().port}/m/${id}/`;
    },
  })));
}

const CHROMIUM_ARGS = [
  '--no-sandbox', '--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--enable-unsafe-webgpu',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
  '--disable-quic', '--disable-gpu-watchdog', '--mute-audio',
];

// TF.js's WebGL backend runs ops whose inputs are small (< 128 elements) and still on the CPU with
// its CPU kernels (WEBGL_CPU_FORWARD), so a small test case may never reach a shader. noxla's tests
// set NOXLA_WEBGL_NO_CPU_FORWARD=1 (tests/conftest.py): every op then runs on the GPU, as a large
// model's do. The flag is set on every WebGL request, since TF.js keeps it for the page.
function defaultFlags(backend) {
  if (backend !== 'webgl') return {};
  return { WEBGL_CPU_FORWARD: !process.env.NOXLA_WEBGL_NO_CPU_FORWARD };
}

async function main() {
  const modules = process.env.NODE_PATH;
  const server = await startServer(modules);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'noxla-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: process.env.NOXLA_CHROMIUM || '/usr/bin/chromium', headless: true,
    args: CHROMIUM_ARGS, userDataDir: profile, protocolTimeout: 300000,
  });
  let page = null;  // one page serves every model (TF.js loads once)
  let log = [];

  // After a failure the page is replaced by a fresh one, so that a lost WebGL context, a destroyed
  // WebGPU device or a corrupted wasm heap cannot fail the next model's run.
  async function open() {
    if (page) return page;
    const fresh = await browser.newPage();
    fresh.on('console', (m) => { if (log.length < 50) log.push(m.text()); });
    fresh.on('pageerror', (e) => { if (log.length < 50) log.push(String(e)); });
    await fresh.goto(`${server.origin}/page/index.html?harness=1`, { waitUntil: 'load' });
    await fresh.waitForFunction('window.noxla && window.noxla.ready', { timeout: 60000 });
    page = fresh;
    return page;
  }

  async function demo(request) {
    const tab = await browser.newPage();
    try {
      await tab.setViewport({ width: 1000, height: 560 });
      await tab.goto(`${server.url(request.demo)}index.html?run=1&backend=${request.backend}`, { waitUntil: 'load' });
      await tab.waitForFunction('window.noxla && window.noxla.demoDone', { timeout: 120000 });
      const result = await tab.evaluate('window.noxla.lastResult');
      if (request.screenshot) await tab.screenshot({ path: request.screenshot });
      return result || { error: 'the page produced no result' };
    } finally {
      await tab.close();
    }
  }

  async function handle(request) {
    if (request.demo) return demo(request);
    const page = await open();
    if (request.probe) {
      return { backends: await page.evaluate('noxla.availableBackends()'), version: await browser.version() };
    }
    const mtime = fs.statSync(path.join(request.model, 'model.json')).mtimeMs;
    log = [];
    return page.evaluate((req) => noxla.runEncoded(req), {
      model: `${server.url(request.model)}model.json?v=${mtime}`, backend: request.backend,
      inputs: request.inputs, repeats: request.repeats || 0, flags: request.flags || defaultFlags(request.backend),
    });
  }

  await serveJsonLines(handle, (e) => {
    const message = String(e && e.message ? e.message : e).split('\n').slice(0, 3).join(' | ');
    if (page) page.close().catch(() => {});
    page = null;
    return { error: message + (log.length ? ` (console: ${log.slice(-3).join(' | ').slice(0, 500)})` : '') };
  });
  await browser.close();
  server.server.close();
  fs.rmSync(profile, { recursive: true, force: true });
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: `browser runner failed to start: ${e.message}` }) + '\n');
  process.exit(1);
});
