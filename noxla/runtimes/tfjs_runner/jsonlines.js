// The runners' protocol: one JSON request per stdin line, one JSON reply per stdout line, in order.
// `handle(request)` answers a request; `onError(e)` turns a failure into the reply. Returns a
// promise that settles after the last reply once stdin closes.
const readline = require('readline');

function serveJsonLines(handle, onError) {
  const lines = readline.createInterface({ input: process.stdin });
  let queue = Promise.resolve();
  lines.on('line', (line) => {
    queue = queue.then(async () => {
      let reply;
      try {
        reply = await handle(JSON.parse(line));
      } catch (e) {
        reply = onError(e);
      }
      process.stdout.write(JSON.stringify(reply) + '\n');
    });
  });
  return new Promise((resolve) => lines.on('close', () => resolve(queue)));
}

module.exports = { serveJsonLines };
