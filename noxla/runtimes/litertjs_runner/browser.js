// Runs .tflite models on LiteRT.js (wasm and WebGPU) in headless Chromium, for noxla's tests and
// `noxla export --verify-browser`. Line protocol on stdin/stdout (../tfjs_runner/jsonlines.js):
//   {"model": file.tflite, "accelerator": "wasm"|"webgpu", "inputs": {name: {dtype, shape, data}}, "repeats": n}
//   -> {"outputs": {...}, "ms": median latency, "times": [...], "placement": {gpuOps, cpuOps, unsupported, fullyAccelerated}}
//   {"probe": true} -> {"accelerators": [...], "version": "...", "build": "jspi"|"default"}
//   {"demo": dir} -> the export's own page (index.html beside model.tflite) run as a user sees it:
//   {"results": [{accelerator, maxError, ms, placement} | {accelerator, error}]}
// or {"error": message}. LiteRT.js (@litertjs/core, its wasm files, @litertjs/wasm-utils) is served
// from node_modules on 127.0.0.1 under .../litertjs/: its JSPI build, or with NOXLA_LITERTJS_BUILD=default
// its default build (wasm only).
'use strict';
const fs = require('fs');
const path = require('path');
const { failedToStart, inside, serveRequests, startServer } = require('../tfjs_runner/chromium.js');

function bundleDirs(modules) {
  return {
    core: path.join(modules, '@litertjs', 'core', 'dist'),
    wasm: path.join(modules, '@litertjs', 'core', 'wasm'),
    'wasm-utils': path.join(modules, '@litertjs', 'wasm-utils', 'dist'),
  };
}

async function demo(browser, server, request) {
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

// The page keeps every model it compiled; after this many it is replaced by a fresh one. Deleting a
// compiled model instead (`model.delete()`) makes every transposed convolution LiteRT.js 2.5.3's
// wasm build compiles afterwards about 10x slower (vae_decoder 0.23 -> 2.07 ms; convolutions, fully
// connected layers and native LiteRT unaffected): the browser benchmark's ninth model measured that.
const MODELS_PER_PAGE = 8;
const compiled = new Set();  // url|accelerator of the models the current page compiled

async function main() {
  const bundles = bundleDirs(process.env.NODE_PATH);
  const server = await startServer(path.join(__dirname, 'index.html'), (url) => {
    const bundle = url.match(/\/litertjs\/(core|wasm|wasm-utils)\/([^/]+)$/);
    return bundle ? inside(bundles[bundle[1]], bundle[2]) : null;
  });
  // One page serves every model (LiteRT.js loads once).
  await serveRequests(server, {
    profilePrefix: 'noxla-litertjs-', ready: 'window.noxla && window.noxla.ready',
    pagePath: `/page/index.html?harness=1${process.env.NOXLA_LITERTJS_BUILD === 'default' ? '&build=default' : ''}`,
    async handle(request, session) {
      if (request.demo) return demo(session.browser, server, request);
      if (request.probe) {
        return { accelerators: await session.evaluate('noxla.accelerators()'), build: await session.evaluate('noxla.build'),
                 version: await session.browser.version() };
      }
      const mtime = fs.statSync(request.model).mtimeMs;
      const url = `${server.url(path.dirname(request.model))}${encodeURIComponent(path.basename(request.model))}?v=${mtime}`;
      const key = `${url}|${request.accelerator}`;
      if (!compiled.has(key) && compiled.size >= MODELS_PER_PAGE) {
        await session.reset();
        compiled.clear();
      }
      compiled.add(key);
      session.clearLog();
      return session.evaluate((req) => noxla.runEncoded(req), {
        model: url, accelerator: request.accelerator, inputs: request.inputs, repeats: request.repeats || 0,
        signature: request.signature || null,
      });
    },
  });
}

main().catch(failedToStart('LiteRT.js browser runner'));
