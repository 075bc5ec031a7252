// Runs .tflite models on LiteRT.js (wasm and WebGPU) in headless Chromium, for noxla's tests and
// `noxla export --verify-browser`. Line protocol on stdin/stdout (../tfjs_runner/jsonlines.js):
//   {"model": file.tflite, "accelerator": "wasm"|"webgpu", "inputs": {name: {dtype, shape, data}}, "repeats": n}
//   -> {"outputs": {...}, "ms": median latency, "times": [...], "placement": {gpuOps, cpuOps, unsupported, fullyAccelerated}}
//   {"probe": true} -> {"accelerators": [...], "version": "..."}
//   {"demo": dir} -> the export's own page (index.html beside model.tflite) run as a user sees it:
//   {"results": [{accelerator, maxError, ms, placement} | {accelerator, error}]}
// or {"error": message}. LiteRT.js (@litertjs/core, its wasm files, @litertjs/wasm-utils) is served
// from node_modules on 127.0.0.1 under .../litertjs/.
'use strict';
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { serveJsonLines } = require('../tfjs_runner/jsonlines.js');
const puppeteer = require('puppeteer-core');

const PAGE = path.join(__dirname, 'index.html');
const MIME = { '.html': 'text/html', '.js': 'text/javascript', '.json': 'application/json',
               '.wasm': 'application/wasm', '.tflite': 'application/octet-stream' };

function bundleDirs(modules) {
  return {
    core: path.join(modules, '@litertjs', 'core', 'dist'),
    wasm: path.join(modules, '@litertjs', 'core', 'wasm'),
    'wasm-utils': path.join(modules, '@litertjs', 'wasm-utils', 'dist'),
  };
}

function startServer(modules) {
  const bundles = bundleDirs(modules);
  const dirs = [];
  const inside = (dir, rel) => {
    const candidate = path.join(dir, rel);
    return !path.relative(dir, candidate).startsWith('..') && fs.existsSync(candidate) ? candidate : null;
  };
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const bundle = url.match(/\/litertjs\/(core|wasm|wasm-utils)\/([^/]+)$/);
    const model = url.match(/^\/m\/(\d+)\/(.+)$/);
    let file = null;
    if (bundle) file = inside(bundles[bundle[1]], bundle[2]);
    else if (url === '/page/index.html') file = PAGE;
    else if (model && dirs[+model[1]]) file = inside(dirs[+model[1]], model[2]);
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
      return `/m/${id}/`;
    },
  })));
}

// SwiftShader gives headless Chromium a WebGPU adapter (on the CPU: placement and correctness mean
// something there, latency does not).
const CHROMIUM_ARGS = [
  '--no-sandbox', '--enable-unsafe-webgpu', '--enable-unsafe-swiftshader', '--use-angle=swiftshader',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
  '--disable-quic', '--disable-gpu-watchdog', '--mute-audio',
];

async function main() {
  const server = await startServer(process.env.NODE_PATH);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'noxla-litertjs-'));
  const browser = await puppeteer.launch({
    executablePath: process.env.NOXLA_CHROMIUM || '/usr/bin/chromium', headless: true,
    args: CHROMIUM_ARGS, userDataDir: profile, protocolTimeout: 300000,
  });
  let page = null;  // one page serves every model (LiteRT.js loads once)
  let log = [];

  // After a failure the page is replaced, so that a destroyed WebGPU device or a corrupted wasm
  // heap cannot fail the next model's run.
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
      await tab.setViewport({ width: 1000, height: 480 });
      await tab.goto(`${server.origin}${server.url(request.demo)}index.html`, { waitUntil: 'load' });
      await tab.waitForFunction('window.noxla && window.noxla.demoDone', { timeout: 180000 });
      const results = await tab.evaluate('window.noxla.lastResults');
      if (request.screenshot) await tab.screenshot({ path: request.screenshot });
      return results ? { results } : { error: 'the page produced no result' };
    } finally {
      await tab.close();
    }
  }

  async function handle(request) {
    if (request.demo) return demo(request);
    const page = await open();
    if (request.probe) {
      return { accelerators: await page.evaluate('noxla.accelerators()'), version: await browser.version() };
    }
    const mtime = fs.statSync(request.model).mtimeMs;
    const url = `${server.url(path.dirname(request.model))}${encodeURIComponent(path.basename(request.model))}?v=${mtime}`;
    log = [];
    return page.evaluate((req) => noxla.runEncoded(req), {
      model: url, accelerator: request.accelerator, inputs: request.inputs, repeats: request.repeats || 0,
      signature: request.signature || null,
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
  process.stdout.write(JSON.stringify({ error: `LiteRT.js browser runner failed to start: ${e.message}` }) + '\n');
  process.exit(1);
});
