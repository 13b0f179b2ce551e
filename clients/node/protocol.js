'use strict';
// lockcompare's external-client protocol, the Node side (docs/clients.md): JSON lines on
// stdin/stdout, one reply per request, every time in nanoseconds on CLOCK_MONOTONIC
// (process.hrtime.bigint(), sent as decimal strings: a JavaScript number cannot hold them exactly).
//
// An adapter gives the library's name and version and implements the lock calls:
//   start({nodes}), acquire({key, ttl_ms}), release({owner}), check({owner}), extend({owner, ttl_ms}),
//   close(); each returns (a promise of) the reply's fields. serve() adds id, library_ns, events.

const readline = require('readline');

const mono = () => process.hrtime.bigint();

/** A wall-clock deadline (Date.now() milliseconds, as the libraries keep them) on CLOCK_MONOTONIC. */
function fromWall(expirationMs) {
  const nowMono = mono();
  const nowWall = Date.now();
  return (nowMono + BigInt(Math.round((expirationMs - nowWall) * 1e6))).toString();
}

/** A deadline ttlMs after the monotonic time t0 (a bigint). */
function after(t0, ttlMs) {
  return (t0 + BigInt(Math.round(ttlMs * 1e6))).toString();
}

/** What the library reported (renewals, losses), until the harness asks for "events". */
const reported = [];

function report(event) {
  reported.push({ ...event, t0: event.t0.toString(), t1: (event.t1 ?? event.t0).toString() });
}

function serve(adapter) {
  const send = (reply) => process.stdout.write(JSON.stringify(reply) + '\n'); // synchronous on a pipe
  const timed = async (call) => {
    const t0 = mono();
    const reply = await call();
    return { ...reply, library_ns: (mono() - t0).toString() };
  };
  const ops = {
    hello: async (req) => {
      await adapter.start({ nodes: req.nodes, requestTimeoutMs: req.request_timeout_ms });
      return {
        ok: true,
        protocol: 1,
        library: adapter.library,
        version: adapter.version,
        // What each row records (docs/clients.md): the lock's npm package and the Redis client under
        // it, each from its installed package.json.
        versions: { [adapter.library]: adapter.version, ioredis: require('ioredis/package.json').version },
        runtime: `node ${process.version}`,
        monotonic_ns: mono().toString(),
      };
    },
    acquire: (req) => timed(() => adapter.acquire({ key: req.key, ttlMs: req.ttl_ms })),
    release: (req) => timed(() => adapter.release({ key: req.key, owner: req.owner })),
    check: async (req) => adapter.check({ owner: req.owner }),
    extend: (req) => timed(() => adapter.extend({ owner: req.owner, ttlMs: req.ttl_ms })),
    events: async () => ({ ok: true, events: reported.splice(0, reported.length) }),
    close: async () => {
      await adapter.close();
      return { ok: true };
    },
  };
  const lines = readline.createInterface({ input: process.stdin });
  lines.on('line', async (line) => {
    let req;
    try {
      req = JSON.parse(line);
    } catch (err) {
      send({ id: null, ok: false, error: `not JSON: ${line.slice(0, 80)}` });
      return;
    }
    const op = ops[req.op];
    if (!op) {
      send({ id: req.id, ok: false, error: `unknown op ${req.op}` });
      return;
    }
    let reply;
    try {
      reply = await op(req);
    } catch (err) {
      reply = { ok: false, reason: 'error', error: String((err && err.message) || err) };
    }
    send({ id: req.id, ...reply });
    if (req.op === 'close') process.exit(0);
  });
  // The worker is gone (or closed our stdin): nothing will ask for the locks again.
  lines.on('close', () => process.exit(0));
}

/** ioredis clients for the lock nodes, with ioredis's defaults. They connect in the background
 * (commands wait in ioredis's offline queue until then): a start must stay short. */
async function connect(urls) {
  const Redis = require('ioredis');
  return urls.map((url) => new Redis(url));
}

function disconnect(clients) {
  for (const client of clients) client.disconnect();
}

/** Which lock nodes answered a grant, per lock value (the owner token). */
class Grants {
  constructor() {
    this.byValue = new Map();
  }
  add(value, index) {
    if (!this.byValue.has(value)) this.byValue.set(value, new Set());
    this.byValue.get(value).add(index);
  }
  take(value) {
    const nodes = [...(this.byValue.get(value) || [])].sort((a, b) => a - b);
    this.byValue.delete(value);
    return nodes;
  }
}

module.exports = { mono, fromWall, after, report, serve, connect, disconnect, Grants };
