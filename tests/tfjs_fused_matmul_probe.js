// TF.js's fused matMul kernel on wasm against cpu, layout by layout (tests/test_emitted_forms.py):
// prints one JSON line per case, {m, k, n, ta, tb, bias, act, diff} (max |wasm - cpu|).
'use strict';
const tf = require('@tensorflow/tfjs');
require('@tensorflow/tfjs-backend-wasm');

function values(shape, seed) {  // a fixed pseudo-random tensor in [-1, 1)
  const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
  let s = seed;
  for (let i = 0; i < data.length; i++) {
    s = (s * 1103515245 + 12345) % 2147483648;
    data[i] = (s / 2147483648) * 2 - 1;
  }
  return tf.tensor(data, shape);
}

async function results(backend, cases) {
  await tf.setBackend(backend);
  await tf.ready();
  const out = [];
  for (const c of cases) {
    const a = values(c.ta ? [c.k, c.m] : [c.m, c.k], 1);
    const b = values(c.tb ? [c.n, c.k] : [c.k, c.n], 2);
    const bias = c.bias ? values([c.n], 3) : undefined;
    const y = tf.fused.matMul({ a, b, transposeA: c.ta, transposeB: c.tb, bias, activation: c.act });
    out.push(Array.from(await y.data()));
  }
  return out;
}

(async () => {
  const cases = [];
  for (const [m, k, n] of [[2, 256, 10], [2, 8, 16], [2, 16, 48], [3, 16, 4], [5, 7, 3]]) {
    for (const ta of [false, true]) for (const tb of [false, true]) for (const bias of [false, true]) {
      for (const act of ['linear', 'relu']) cases.push({ m, k, n, ta, tb, bias, act });
    }
  }
  const cpu = await results('cpu', cases);
  const wasm = await results('wasm', cases);
  cases.forEach((c, i) => {
    const diff = Math.max(...cpu[i].map((v, j) => Math.abs(v - wasm[i][j])));
    process.stdout.write(JSON.stringify({ ...c, diff }) + '\n');
  });
})();
