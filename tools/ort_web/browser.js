// Runs .onnx models on onnxruntime-web (wasm and WebGPU execution providers) in headless Chromium,
// for tools/browser_benchmark.py only. Same line protocol as noxla/tfjs_runner:
//   {"model": file.onnx, "ep": "wasm"|"webgpu", "inputs": {name: {dtype, shape, data}}, "repeats": n}
//   -> {"outputs": {...}, "ms": median, "times": [...]}     {"probe": true} -> {"eps": [...], "version"}
// or {"error": message}. onnxruntime-web's dist/ is served from ORT_DIST on 127.0.0.1 under /ort/.
'use strict';
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { serveJsonLines } = require(process.env.NOXLA_JSONLINES);
const puppeteer = require('puppeteer-core');

const PAGE = path.join(__dirname, 'index.html');
const MIME = { '.html': 'text/html', '.mjs': 'text/javascript', '.js': 'text/javascript',
               '.wasm': 'application/wasm' };
// As noxla/litertjs_runner/browser.js: SwiftShader's WebGPU adapter runs on the CPU.
const CHROMIUM_ARGS = [
  '--no-sandbox', '--enable-unsafe-webgpu', '--enable-unsafe-swiftshader', '--use-angle=swiftshader',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
  '--disable-quic', '--disable-gpu-watchdog', '--mute-audio',
];

function startServer(dist) {
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    let file = null;
    const ort = url.match(/^\/ort\/([^/]+)$/);
    if (ort && fs.existsSync(path.join(dist, ort[1]))) file = path.join(dist, ort[1]);
    else if (url === '/page/index.html') file = PAGE;
    else if (url.startsWith('/file/')) file = url.slice('/file'.length);  // 127.0.0.1 only, benchmark-only
    if (!file || !fs.existsSync(file)) {
      res.writeHead(404);
      res.end();
      return;
    }
    res.writeHead(200, { 'Content-Type': MIME[path.extname(file)] || 'application/octet-stream',
                         'Cache-Control': 'no-store' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    server, origin: `http://127.0.0.1:${server.address().port}` })));
}

async function main() {
  const server = await startServer(process.env.ORT_DIST);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'noxla-ort-'));
  const browser = await puppeteer.launch({
    executablePath: process.env.NOXLA_CHROMIUM || '/usr/bin/chromium', headless: true,
    args: CHROMIUM_ARGS, userDataDir: profile, protocolTimeout: 300000,
  });
  let page = null;
  let log = [];
  async function open() {
    if (page) return page;
    const fresh = await browser.newPage();
    fresh.on('console', (m) => { if (log.length < 50) log.push(m.text()); });
    fresh.on('pageerror', (e) => { if (log.length < 50) log.push(String(e)); });
    await fresh.goto(`${server.origin}/page/index.html`, { waitUntil: 'load' });
    await fresh.waitForFunction('window.bench && window.bench.ready', { timeout: 60000 });
    page = fresh;
    return page;
  }
  async function handle(request) {
    const page = await open();
    if (request.probe) return { eps: await page.evaluate('bench.eps()'), version: await browser.version() };
    log = [];
    const mtime = fs.statSync(request.model).mtimeMs;
    return page.evaluate((req) => bench.runEncoded(req), {
      model: `/file${request.model}?v=${mtime}`, ep: request.ep, inputs: request.inputs, repeats: request.repeats || 0,
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
  process.stdout.write(JSON.stringify({ error: `onnxruntime-web runner failed to start: ${e.message}` }) + '\n');
  process.exit(1);
});
