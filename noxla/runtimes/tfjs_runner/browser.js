// Runs TF.js graph models in headless Chromium, for noxla's tests and verify step.
// Same line protocol as runner.js, on stdin/stdout:
//   {"model": dir, "backend": "webgl"|"wasm"|"cpu"|"webgpu", "inputs": {...}, "repeats": n[, "outputs": [name]]}
// -> {"outputs": {name: {dtype, shape, data}}, "ms": median latency, "flags": {...}} or {"error": message}.
//   {"probe": true} -> {"backends": [...], "version": "..."}
//   {"demo": dir, "backend": b, "screenshot": png?} -> the export's own index.html run on b, as a
//   user sees it: {"maxError", "ms", "rows", "env"} (and a screenshot of the page when asked).
// Model directories are served on 127.0.0.1 with the TF.js bundles from node_modules (the versions
// the converter writes for) and noxla's demo page (index.html), which does the work in the browser:
// the tests, `noxla export --verify` and a user's `noxla serve` all run the same page code.
'use strict';
const fs = require('fs');
const path = require('path');
const { failedToStart, serveRequests, startServer } = require('./chromium.js');

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

// TF.js's WebGL backend runs ops whose inputs are small (< 128 elements) and still on the CPU with
// its CPU kernels (WEBGL_CPU_FORWARD), so a small test case may never reach a shader. noxla's tests
// set NOXLA_WEBGL_NO_CPU_FORWARD=1 (tests/conftest.py): every op then runs on the GPU, as a large
// model's do. The flag is set on every WebGL request, since TF.js keeps it for the page.
function defaultFlags(backend) {
  if (backend !== 'webgl') return {};
  return { WEBGL_CPU_FORWARD: !process.env.NOXLA_WEBGL_NO_CPU_FORWARD };
}

async function demo(browser, server, request) {
  const tab = await browser.newPage();
  try {
    await tab.setViewport({ width: 1000, height: 560 });
    await tab.goto(`${server.origin}${server.url(request.demo)}index.html?run=1&backend=${request.backend}`,
                   { waitUntil: 'load' });
    await tab.waitForFunction('window.noxla && window.noxla.demoDone', { timeout: 120000 });
    const result = await tab.evaluate('window.noxla.lastResult');
    if (request.screenshot) await tab.screenshot({ path: request.screenshot });
    return result || { error: 'the page produced no result' };
  } finally {
    await tab.close();
  }
}

async function main() {
  const bundles = bundleFiles(process.env.NODE_PATH);
  const server = await startServer(path.join(__dirname, 'index.html'), (url) => {
    const tfjs = url.match(/\/tfjs\/([^/]+)$/);
    return tfjs ? bundles[tfjs[1]] || null : null;
  });
  // One page serves every model (TF.js loads once).
  await serveRequests(server, {
    profilePrefix: 'noxla-chromium-', pagePath: '/page/index.html?harness=1', ready: 'window.noxla && window.noxla.ready',
    async handle(request, session) {
      if (request.demo) return demo(session.browser, server, request);
      if (request.probe) {
        return { backends: await session.evaluate('noxla.availableBackends()'), version: await session.browser.version() };
      }
      const mtime = fs.statSync(path.join(request.model, 'model.json')).mtimeMs;
      session.clearLog();
      return session.evaluate((req) => noxla.runEncoded(req), {
        model: `${server.url(request.model)}model.json?v=${mtime}`, backend: request.backend,
        inputs: request.inputs, repeats: request.repeats || 0, flags: request.flags || defaultFlags(request.backend),
        outputs: request.outputs || null,
      });
    },
  });
}

main().catch(failedToStart('browser runner'));
