'use strict';
// npm `redlock` 4.2.0 as its users call it: one Redlock over one ioredis client per node (ioredis
// defaults), the README's settings except retryCount: 0 IN THE CONSTRUCTOR (a per-call retryCount
// of 0 is ignored by redlock 4: `options.retryCount || self.retryCount`) so that an acquire is one
// attempt; the harness retries. No automatic extension. Validity: start + ttl - (1% of ttl + 2 ms)
// on the wall clock, sent as a CLOCK_MONOTONIC deadline.
const Redlock = require('redlock');
const { serve, connect, disconnect, fromWall, Grants } = require('./protocol');

let clients = [];
let redlock;
const grants = new Grants();
const held = new Map(); // owner -> redlock Lock

serve({
  library: 'redlock',
  version: require('redlock/package.json').version,
  async start({ nodes }) {
    clients = await connect(nodes);
    redlock = new Redlock(clients, { driftFactor: 0.01, retryCount: 0, retryDelay: 200, retryJitter: 200 });
    redlock.on('clientError', () => {}); // a node that fails counts against the quorum, as the library does
    // Observe, without changing, which node granted each attempt: the lock script returns 1 there.
    const execute = redlock._executeScript.bind(redlock);
    redlock._executeScript = (server, name, args, callback) =>
      execute(server, name, args, (err, result) => {
        if (name === 'lockScript' && !err && String(result) === '1') grants.add(args[args.length - 2], clients.indexOf(server));
        callback(err, result);
      });
  },
  async acquire({ key, ttlMs }) {
    try {
      const lock = await redlock.lock(key, ttlMs);
      held.set(lock.value, lock);
      return { ok: true, owner: lock.value, valid_until: fromWall(lock.expiration), granted_by: grants.take(lock.value) };
    } catch (err) {
      return { ok: false, reason: 'held', error: String(err.message || err) };
    }
  },
  async release({ owner }) {
    const lock = held.get(owner);
    held.delete(owner);
    if (!lock) return { ok: true, released: false };
    try {
      await redlock.unlock(lock);
      return { ok: true, released: true };
    } catch (err) {
      return { ok: true, released: false, error: String(err.message || err) };
    }
  },
  async check({ owner }) {
    const lock = held.get(owner);
    if (!lock) return { ok: true, valid: false, reason: 'lost' };
    return { ok: true, valid: lock.expiration > Date.now(), valid_until: fromWall(lock.expiration), reason: 'expired' };
  },
  async extend({ owner, ttlMs }) {
    const lock = held.get(owner);
    if (!lock) return { ok: false, reason: 'lost' };
    try {
      await lock.extend(ttlMs);
      return { ok: true, valid_until: fromWall(lock.expiration) };
    } catch (err) {
      return { ok: false, reason: 'lost', error: String(err.message || err) };
    }
  },
  async close() {
    disconnect(clients);
  },
});
