// Runs .onnx models on onnxruntime-web (wasm and WebGPU execution providers) in headless Chromium,
// for tools/browser_benchmark.py only. Same line protocol as noxla/runtimes/tfjs_runner:
//   {"model": file.onnx, "external": [location], "ep": "wasm"|"webgpu", "inputs": {name: {dtype, shape, data}},
//    "repeats": n}
//   -> {"outputs": {...}, "ms": median, "times": [...]}     {"probe": true} -> {"eps": [...], "version"}
// or {"error": message}. onnxruntime-web's dist/ is served from ORT_DIST on 127.0.0.1 under /ort/.
'use strict';
const fs = require('fs');
const path = require('path');
const { failedToStart, inside, serveRequests, startServer } = require(process.env.NOXLA_CHROMIUM_JS);

async function main() {
  const dist = process.env.ORT_DIST;
  const server = await startServer(path.join(__dirname, 'index.html'), (url) => {
    const ort = url.match(/^\/ort\/([^/]+)$/);
    if (ort) return inside(dist, ort[1]);
    // Any file by its absolute path: the server listens on 127.0.0.1 only, for the benchmark alone.
    return url.startsWith('/file/') && fs.existsSync(url.slice('/file'.length)) ? url.slice('/file'.length) : null;
  });
  await serveRequests(server, {
    profilePrefix: 'noxla-ort-', pagePath: '/page/index.html', ready: 'window.bench && window.bench.ready',
    async handle(request, session) {
      const page = await session.open();
      if (request.probe) return { eps: await page.evaluate('bench.eps()'), version: await session.browser.version() };
      session.clearLog();
      const mtime = fs.statSync(request.model).mtimeMs;
      // External weight files, by the location the .onnx names them with (relative to its folder).
      const external = (request.external || []).map((name) => ({ path: name, url: `/file${path.join(path.dirname(request.model), name)}` }));
      return page.evaluate((req) => bench.runEncoded(req), {
        model: `/file${request.model}?v=${mtime}`, external, ep: request.ep, inputs: request.inputs,
        repeats: request.repeats || 0,
      });
    },
  });
}

main().catch(failedToStart('onnxruntime-web runner'));
