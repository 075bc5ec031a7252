// tools/litertjs_call_cost.py's runner: serves call_cost.html (LiteRT.js from LITERTJS_MODULES,
// onnxruntime-web from ORT_DIST, model files by absolute path) to one headless Chromium and answers
//   {"models": [{name, tflite, onnx, shape, parts}], "rounds": n, "batchMs": ms}
//   -> {"checks": {variant: first output value}, "perCall": {variant: [ms per call, per round]}, "n": {...}}
// over the runners' line protocol.
'use strict';
const fs = require('fs');
const path = require('path');
const { failedToStart, inside, serveRequests, startServer } = require(process.env.NOXLA_CHROMIUM_JS);

async function main() {
  const litert = path.join(process.env.NODE_PATH, '@litertjs');
  const bundles = { core: path.join(litert, 'core', 'dist'), wasm: path.join(litert, 'core', 'wasm'),
                    'wasm-utils': path.join(litert, 'wasm-utils', 'dist') };
  const server = await startServer(path.join(__dirname, 'call_cost.html'), (url) => {
    const ort = url.match(/^\/ort\/([^/]+)$/);
    if (ort) return inside(process.env.ORT_DIST, ort[1]);
    const bundle = url.match(/^\/litertjs\/(core|wasm|wasm-utils)\/([^/]+)$/);
    if (bundle) return inside(bundles[bundle[1]], bundle[2]);
    // Any file by its absolute path: the server listens on 127.0.0.1 only, for this tool alone.
    return url.startsWith('/file/') && fs.existsSync(url.slice('/file'.length)) ? url.slice('/file'.length) : null;
  });
  await serveRequests(server, {
    profilePrefix: 'noxla-callcost-', pagePath: '/page/index.html', ready: 'window.noxla && window.noxla.ready',
    async handle(request, session) {
      const models = request.models.map((m) => ({ ...m, tflite: `/file${m.tflite}`, onnx: `/file${m.onnx}` }));
      const checks = await session.evaluate((ms) => ab.setup(ms), models);
      const timed = await session.evaluate(([rounds, batchMs]) => ab.run(rounds, batchMs), [request.rounds, request.batchMs]);
      return { checks, ...timed };
    },
  });
}

main().catch(failedToStart('call-cost runner'));
