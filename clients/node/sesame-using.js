'use strict';
// @sesamecare-oss/redlock 1.4.x (the maintained redlock v5 line) through using(): the routine
// holds the lock from the harness's acquire to its release, while using() extends the lock by
// itself when less than automaticExtensionThreshold (500 ms, the default) remains; a failed
// extension only aborts the routine's AbortSignal. Library defaults (README) everywhere except
// using()'s settings { retryCount: 0 }, so that an acquire is one attempt (the harness retries);
// those settings stay with the lock, so each extension is one quorum round too (using() itself
// tries again at once while the lock has not expired). Release uses the instance's defaults:
// 10 retries 200 ± 100 ms apart (about 2 s to give up on a lock that is no longer ours).
//
// "check" answers from the abort signal: whether a routine that checks it would still write.
// The manifest decides whether the worker asks (node-sesame-using-checked) or not (node-sesame-using).
const { Redlock } = require('@sesamecare-oss/redlock');
const { serve, connect, disconnect, fromWall, report, mono, Grants } = require('./protocol');

let clients = [];
let redlock;
const grants = new Grants();
const held = new Map(); // owner -> { signal, context, finish, done }

function observeGrants(client, index) {
  // The library defines its scripts as ioredis commands on first use; wrap acquireLock when it
  // does, to see which node granted (observation only: the result is passed on unchanged).
  const define = client.defineCommand.bind(client);
  client.defineCommand = (name, definition) => {
    define(name, definition);
    if (name !== 'acquireLock') return;
    const command = client[name];
    client[name] = (...args) =>
      command.apply(client, args).then((result) => {
        if (result === 1) grants.add(String(args[3]), index); // (numKeys, key, db, value, duration)
        return result;
      });
  };
}

serve({
  library: '@sesamecare-oss/redlock',
  version: require('@sesamecare-oss/redlock/package.json').version,
  async start({ nodes }) {
    clients = await connect(nodes);
    clients.forEach(observeGrants);
    redlock = new Redlock(clients);
    // Record every extension using() makes (the instance's extend, which Lock.extend calls).
    const extend = redlock.extend.bind(redlock);
    redlock.extend = async (existing, duration, settings) => {
      const t0 = mono();
      const owner = existing.value;
      try {
        const lock = await extend(existing, duration, settings);
        report({ t0, t1: mono(), ok: true, owner, valid_until: fromWall(lock.expiration) });
        return lock;
      } catch (err) {
        report({ t0, t1: mono(), ok: false, owner, reason: 'lost', error: String(err.message || err) });
        throw err;
      }
    };
  },
  acquire({ key, ttlMs }) {
    return new Promise((reply) => {
      let replied = false;
      let finish;
      const finished = new Promise((resolve) => {
        finish = resolve;
      });
      const done = redlock.using([key], ttlMs, { retryCount: 0 }, async (signal, context) => {
        const owner = context.lock.value;
        held.set(owner, { signal, context, finish, done });
        replied = true;
        reply({
          ok: true,
          owner,
          valid_until: fromWall(context.lock.expiration),
          granted_by: grants.take(owner),
        });
        await finished; // the critical section runs in the worker until it releases
      });
      done.catch((err) => {
        if (!replied) reply({ ok: false, reason: 'held', error: String(err.message || err) });
      });
    });
  },
  async release({ owner }) {
    const entry = held.get(owner);
    held.delete(owner);
    if (!entry) return { ok: true, released: false };
    entry.finish();
    try {
      await entry.done; // using() waits for an extension in flight, then releases (with retries)
      return { ok: true, released: true };
    } catch (err) {
      return { ok: true, released: false, error: String(err.message || err) };
    }
  },
  async check({ owner }) {
    const entry = held.get(owner);
    if (!entry) return { ok: true, valid: false, reason: 'lost' };
    if (entry.signal.aborted) return { ok: true, valid: false, reason: 'aborted' };
    return { ok: true, valid: true, valid_until: fromWall(entry.context.lock.expiration) };
  },
  async extend() {
    return { ok: false, reason: 'unsupported', error: 'using() extends by itself' };
  },
  async close() {
    for (const entry of held.values()) entry.finish();
    disconnect(clients);
  },
});
