// What the headless-Chromium runners share (browser.js here, ../litertjs_runner/browser.js and the
// benchmark's tools/ort_web/browser.js): a static server on 127.0.0.1, and one Chromium whose one
// page answers every request over the JSON-lines protocol and is replaced after a failure, so that
// a lost WebGL context, a destroyed WebGPU device or a corrupted wasm heap cannot fail the next run.
'use strict';
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { serveJsonLines } = require('./jsonlines.js');

const MIME = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript',
               '.json': 'application/json', '.wasm': 'application/wasm', '.png': 'image/png' };

// SwiftShader gives headless Chromium WebGL and a WebGPU adapter, both on the CPU: correctness and
// op placement mean something there, absolute latency does not.
const CHROMIUM_ARGS = [
  '--no-sandbox', '--enable-unsafe-webgpu', '--enable-unsafe-swiftshader', '--use-angle=swiftshader',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
  '--disable-quic', '--disable-gpu-watchdog', '--mute-audio',
];

// `dir/rel` when it stays inside `dir` and exists, else null.
function inside(dir, rel) {
  const candidate = path.join(dir, rel);
  return !path.relative(dir, candidate).startsWith('..') && fs.existsSync(candidate) ? candidate : null;
}

// Serves `/page/index.html` (the runner's page), `/m/<id>/<file>` from directories registered with
// `url(dir)` (which returns that prefix), and whatever `route(url)` maps to a file (a runtime's own
// bundles): anything else is a 404.
function startServer(page, route) {
  const dirs = [];
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const model = url.match(/^\/m\/(\d+)\/(.+)$/);
    let file = route(url);
    if (!file && url === '/page/index.html') file = page;
    else if (!file && model && dirs[+model[1]]) file = inside(dirs[+model[1]], model[2]);
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

// A request whose page has not moved on from one step for this long has hung. Seen: LiteRT.js's
// WebGPU under SwiftShader, in one of three CI runs, never returning from a call. The request is
// then run once more in a new browser (a wedged GPU process would hang any page of the old one),
// and the reply says so; a second hang is the request's error.
const STALL_MS = 1000 * (+process.env.NOXLA_BROWSER_STALL_S || 120);
const POLL_MS = 2000;

// Rejects when `progress()` (the page's step, read every POLL_MS) stays the same for STALL_MS;
// `work` settling first stops the watch.
function watchForStall(work, progress) {
  let timer = null;
  const stalled = new Promise((resolve, reject) => {
    let last = null;
    let since = Date.now();
    const poll = async () => {
      const now = await Promise.race([progress().catch(() => '?'), sleep(POLL_MS).then(() => '(page not answering)')]);
      if (now !== last) [last, since] = [now, Date.now()];
      if (Date.now() - since >= STALL_MS) {
        reject(Object.assign(new Error(`hung: no progress for ${STALL_MS / 1000} s at "${now}"`), { stalled: true }));
      } else {
        timer = setTimeout(poll, POLL_MS);
      }
    };
    timer = setTimeout(poll, POLL_MS);
  });
  return Promise.race([work, stalled]).finally(() => clearTimeout(timer));
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Launches Chromium and answers requests until stdin closes: `handle(request, session)`, where
// `session.open()` gives the page (`pagePath` on the server, loaded once `ready` holds there),
// `session.reset()` closes it, `session.browser` is the browser and `session.clearLog()` starts a
// request's console log, whose last lines a failure's reply carries; `session.evaluate(fn, arg)` runs in that page, whose
// `window.noxla.step` says how far it got.
async function serveRequests(server, { profilePrefix, pagePath, ready, handle }) {
  const puppeteer = require('puppeteer-core');
  const profiles = [];
  const launch = () => {
    profiles.push(fs.mkdtempSync(path.join(os.tmpdir(), profilePrefix)));
    return puppeteer.launch({
      executablePath: process.env.NOXLA_CHROMIUM || '/usr/bin/chromium', headless: true,
      args: CHROMIUM_ARGS, userDataDir: profiles[profiles.length - 1], protocolTimeout: 300000,
    });
  };
  let page = null;
  let log = [];
  const session = {
    browser: await launch(),
    clearLog() { log = []; },
    async open() {
      if (page) return page;
      const fresh = await session.browser.newPage();
      fresh.on('console', (m) => { if (log.length < 50) log.push(m.text()); });
      fresh.on('pageerror', (e) => { if (log.length < 50) log.push(String(e)); });
      await fresh.goto(`${server.origin}${pagePath}`, { waitUntil: 'load' });
      await fresh.waitForFunction(ready, { timeout: 60000 });
      page = fresh;
      return page;
    },
    // Closes the page: the next `open()` loads a fresh one (the runtime's wasm module made anew).
    async reset() {
      const old = page;
      page = null;
      if (old) await old.close().catch(() => {});
    },
    async relaunch() {
      page = null;
      const old = session.browser;
      session.browser = await launch();
      old.process()?.kill('SIGKILL');
    },
  };
  // Runs `fn(arg)` in the harness page, watched for a stall.
  session.evaluate = async (fn, arg) => {
    const harness = await session.open();
    return watchForStall(harness.evaluate(fn, arg), () => harness.evaluate('window.noxla && window.noxla.step'));
  };
  await serveJsonLines(async (request) => {
    try {
      return await handle(request, session);
    } catch (e) {
      if (!e.stalled) throw e;
      await session.relaunch();
      try {
        return { ...(await handle(request, session)), recovered: `${e.message}; ran again in a new browser` };
      } catch (again) {
        if (again.stalled) await session.relaunch();
        throw again;
      }
    }
  }, (e) => {
    const message = String(e && e.message ? e.message : e).split('\n').slice(0, 3).join(' | ');
    if (page) page.close().catch(() => {});
    page = null;
    return { error: message + (log.length ? ` (console: ${log.slice(-3).join(' | ').slice(0, 500)})` : '') };
  });
  await session.browser.close();
  server.server.close();
  for (const profile of profiles) fs.rmSync(profile, { recursive: true, force: true });
}

// The one reply of a runner that could not start.
function failedToStart(what) {
  return (e) => {
    process.stdout.write(JSON.stringify({ error: `${what} failed to start: ${e.message}` }) + '\n');
    process.exit(1);
  };
}

module.exports = { startServer, serveRequests, failedToStart, inside, watchForStall };
