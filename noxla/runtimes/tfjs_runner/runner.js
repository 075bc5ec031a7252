// Serves noxla's requests to run TF.js graph models, one JSON object per line on stdin/stdout:
//   {"model": dir, "backend": "cpu"|"wasm", "inputs": {name: {dtype, shape, data(base64)}}[, "outputs": [name]]}
// -> {"outputs": {name: {dtype, shape, data}}} or {"error": message}.
// "inputs" may be a list instead, fed positionally; the reply then adds "inputNames" (model.inputs).
// With "repeats": n, the model then runs n more times and the reply adds "times" (ms per run,
// each up to its outputs' data being read back), for tools/benchmark.py.
'use strict';
const fs = require('fs');
const path = require('path');
const { serveJsonLines } = require('./jsonlines.js');
const tf = require('@tensorflow/tfjs');
require('@tensorflow/tfjs-backend-wasm');

// Graph models load from disk through a small IO handler: the published fs handler lives in
// @tensorflow/tfjs-node, which cannot be installed without downloading a native binary.
function diskHandler(dir) {
  return {
    load: async () => {
      const model = JSON.parse(fs.readFileSync(path.join(dir, 'model.json'), 'utf8'));
      const weightSpecs = [];
      const buffers = [];
      for (const group of model.weightsManifest || []) {
        weightSpecs.push(...group.weights);
        for (const p of group.paths) buffers.push(fs.readFileSync(path.join(dir, p)));
      }
      const all = Buffer.concat(buffers);
      const weightData = all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength);
      return {
        modelTopology: model.modelTopology, format: model.format, generatedBy: model.generatedBy,
        convertedBy: model.convertedBy, signature: model.signature,
        userDefinedMetadata: model.userDefinedMetadata, modelInitializer: model.modelInitializer,
        weightSpecs, weightData,
      };
    },
  };
}

const TYPED = { float32: Float32Array, int32: Int32Array, bool: Uint8Array };
const models = new Map();  // dir + mtime -> GraphModel; small, models are tiny and reused

async function loadModel(dir) {
  const key = dir + ':' + fs.statSync(path.join(dir, 'model.json')).mtimeMs;
  if (!models.has(key)) {
    if (models.size >= 16) {
      const [oldKey, old] = models.entries().next().value;
      old.dispose();
      models.delete(oldKey);
    }
    const model = await tf.loadGraphModel(diskHandler(dir));
    // An output may be one of the model's own weights (a folded constant): never dispose those.
    model.noxlaWeightIds = new Set(Object.values(model.weights).flat().map((t) => t.id));
    models.set(key, model);
  }
  return models.get(key);
}

function decode(t) {
  const raw = Buffer.from(t.data, 'base64');
  const Typed = TYPED[t.dtype];
  const copy = new Uint8Array(raw.length);
  copy.set(raw);
  return tf.tensor(new Typed(copy.buffer), t.shape, t.dtype);
}

async function encode(tensor) {
  let values = await tensor.data();
  // The cpu backend may hand back a Cast's source array (e.g. Int32Array for a float32 tensor).
  const Typed = TYPED[tensor.dtype];
  if (Typed && !(values instanceof Typed)) values = Typed.from(values);
  const bytes = values;
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return { dtype: tensor.dtype, shape: tensor.shape, data: buf.toString('base64') };
}

async function handle(request) {
  if (tf.getBackend() !== request.backend) {
    if (!(await tf.setBackend(request.backend))) throw new Error(`backend ${request.backend} unavailable`);
    await tf.ready();
  }
  const model = await loadModel(request.model);
  // Inputs by name, or (a list) positionally, in the order the model lists them (model.inputs).
  const positional = Array.isArray(request.inputs);
  const inputs = positional ? request.inputs.map(decode) : {};
  if (!positional) for (const [name, t] of Object.entries(request.inputs)) inputs[name] = decode(t);
  const names = request.outputs || model.outputNodes;  // some outputs: computed from the inputs they read
  let result = await model.executeAsync(inputs, names);
  if (result instanceof tf.Tensor) result = [result];
  const tensors = Array.isArray(result) ? result : names.map((n) => result[n]);
  const outputs = {};
  for (let i = 0; i < names.length; i++) outputs[names[i]] = await encode(tensors[i]);
  const owned = (ts) => ts.filter((t) => !model.noxlaWeightIds.has(t.id));
  tf.dispose(owned(tensors));
  const times = [];
  for (let i = 0; i < (request.repeats || 0); i++) {
    const start = process.hrtime.bigint();
    let again = await model.executeAsync(inputs, names);
    again = again instanceof tf.Tensor ? [again] : again;
    await Promise.all(again.map((t) => t.data()));
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
    tf.dispose(owned(again));
  }
  tf.dispose(Object.values(inputs));
  const reply = request.repeats ? { outputs, times } : { outputs };
  if (positional) reply.inputNames = model.inputs.map((i) => i.name);
  return reply;
}

tf.enableProdMode();
serveJsonLines(handle, (e) => ({ error: String(e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e) }));
